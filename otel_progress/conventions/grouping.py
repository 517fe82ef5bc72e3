"""Runs without an agent span: consecutive tool calls of one client grouped into one run.

An MCP client, a script calling tools directly, or OpenLLMetry's MCP instrumentation (each
``call_tool`` a root span of its own trace) leave every tool call alone in its trace, so a
run by trace would never see a second call. A tool span that is the root of its trace (no
parent span) is therefore put in the run of what it shares with the calls before it, the
first of:

1. span attributes naming a session: ``mcp.session.id``, ``gen_ai.conversation.id``,
   ``session.id`` (OpenInference);
2. the resource's ``service.instance.id`` (the OpenTelemetry Python SDK sets a random one
   per process);
3. the resource's process: ``service.name`` with ``host.name`` (or ``host.id``) and
   ``process.pid``.

With none of them the call stays a run of its own trace. Tool calls under a parent span
(in an agent span, or in any other span of their trace) keep the run they have: one trace
is one request, and unrelated requests of one process are never merged. The exception is
a tool span whose ``gen_ai.operation.name`` is in :data:`PER_CALL_OPERATIONS`: its
producer gives every call a trace of its own under a per-call parent (Gemini CLI:
``schedule_tool_calls`` → ``tool_call``), so it is grouped as a root tool span is.

The key is used as the engine's trace key (``group:`` and the attribute, e.g.
``group:mcp.session.id=4f1c``), so a group never collides with a trace id; detections are
still placed on the real span, and adapters report its real trace id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import as_text
from .record import SpanRecord

__all__ = [
    "GROUP_PREFIX",
    "PER_CALL_OPERATIONS",
    "PROCESS_KEYS",
    "RESOURCE_KEYS",
    "SESSION_KEYS",
    "group_key",
    "is_group_key",
    "own_trace",
]

GROUP_PREFIX = "group:"
SESSION_KEYS = ("mcp.session.id", "gen_ai.conversation.id", "session.id")
RESOURCE_KEYS = ("service.instance.id",)
PROCESS_KEYS = ("service.name", "host.name", "host.id", "process.pid")
_MAX_VALUE = 256
#: ``gen_ai.operation.name`` of tool spans that are each alone in a trace of their own,
#: under a per-call parent span (Gemini CLI's ``tool_call``).
PER_CALL_OPERATIONS = frozenset({"tool_call"})


def own_trace(span: SpanRecord) -> bool:
    """Whether a tool span is the only call of its trace although it has a parent."""
    operation = span.attributes.get("gen_ai.operation.name")
    return isinstance(operation, str) and operation in PER_CALL_OPERATIONS


def _value(mapping: Mapping[str, Any], key: str) -> str | None:
    value = mapping.get(key)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value) if -(2**63) <= value < 2**63 else None
    text = as_text(value)
    if text is None:
        return None
    text = text.strip()
    return text[:_MAX_VALUE] if text else None


def group_key(span: SpanRecord) -> str | None:
    """The engine trace key of the client run a root tool span belongs to, or ``None``
    (the span has a parent, or shares nothing usable)."""
    if span.parent_id and not own_trace(span):
        return None
    attributes = span.attributes
    for key in SESSION_KEYS:
        value = _value(attributes, key)
        if value:
            return f"{GROUP_PREFIX}{key}={value}"
    resource = span.resource or {}
    if not isinstance(resource, Mapping):
        return None
    for key in RESOURCE_KEYS:
        value = _value(resource, key)
        if value:
            return f"{GROUP_PREFIX}{key}={value}"
    pid = _value(resource, "process.pid")
    if pid:
        host = _value(resource, "host.name") or _value(resource, "host.id") or ""
        service = _value(resource, "service.name") or ""
        return f"{GROUP_PREFIX}process={service}@{host}#{pid}"
    return None


def is_group_key(trace_key: str) -> bool:
    """Whether an engine trace key is a group key (not a trace id)."""
    return isinstance(trace_key, str) and trace_key.startswith(GROUP_PREFIX)
