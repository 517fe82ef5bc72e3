"""Runs without an agent span: the calls of one conversation grouped into one run, and
never the calls of strangers.

An MCP client, a script calling tools directly, or OpenLLMetry's MCP instrumentation (each
``call_tool`` a root span of its own trace) leave every tool call alone in its trace, so a
run by trace never sees a second call. A tool span that is the root of its trace (no
parent span) is therefore put in the run of the conversation it names, the first of the
span attributes :data:`SESSION_KEYS`:

1. ``gen_ai.conversation.id`` (the OpenTelemetry GenAI conventions; what an application
   sets to make grouping exact);
2. ``session.id`` (OpenInference, the coding CLIs).

Nothing else groups: a process (``service.instance.id``, host and pid) or a connection
serves many users and conversations at once, and ``mcp.session.id`` is a transport
session (one client connection, shared by the conversations that client carries; the MCP
revision of 2026-07-28 is stateless and has none). A root tool span naming no
conversation stays a run of its own trace. ``otel-progress doctor`` and docs/runs.md say so,
and which attribute to set (:data:`EXACT_ATTRIBUTE`).

Tool calls under a parent span (in an agent span, or in any other span of their trace)
keep the run they have: one trace is one request, and unrelated requests are never
merged. The exception is a tool span whose ``gen_ai.operation.name`` is in
:data:`PER_CALL_OPERATIONS`: its producer gives every call a trace of its own under a
per-call parent (Gemini CLI: ``schedule_tool_calls`` → ``tool_call``), so it is grouped as a
root tool span is.

The key is used as the engine's trace key (``group:`` and the attribute, e.g.
``group:gen_ai.conversation.id=4f1c``), so a group never collides with a trace id;
detections are still placed on the real span, and adapters report its real trace id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import as_text
from .record import SpanRecord

__all__ = [
    "EXACT_ATTRIBUTE",
    "GROUP_PREFIX",
    "PER_CALL_OPERATIONS",
    "SESSION_KEYS",
    "group_key",
    "is_group_key",
    "names_conversation",
    "own_trace",
    "ungrouped_root",
]

GROUP_PREFIX = "group:"
#: Span attributes that name the conversation a root tool call belongs to, in order.
SESSION_KEYS = ("gen_ai.conversation.id", "session.id")
#: The attribute to set on tool spans without an agent span to group them exactly.
EXACT_ATTRIBUTE = "gen_ai.conversation.id"
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
    """The engine trace key of the conversation a root tool span belongs to, or ``None``
    (the span has a parent, or names no conversation: it stays a run of its trace)."""
    if span.parent_id and not own_trace(span):
        return None
    attributes = span.attributes
    for key in SESSION_KEYS:
        value = _value(attributes, key)
        if value:
            return f"{GROUP_PREFIX}{key}={value}"
    return None


def names_conversation(attributes: Mapping[str, Any]) -> bool:
    """Whether span attributes name a conversation (one of :data:`SESSION_KEYS`, not empty)."""
    return any(_value(attributes, key) for key in SESSION_KEYS)


def ungrouped_root(span: SpanRecord) -> bool:
    """Whether a tool span is the root of its trace (no parent span, so no agent span
    above it) and names no conversation: a run of its own, never grouped with the other
    calls of its client (see :mod:`otel_progress.runs.ungrouped`)."""
    return not span.parent_id and not names_conversation(span.attributes)


def is_group_key(trace_key: str) -> bool:
    """Whether an engine trace key is a group key (not a trace id)."""
    return isinstance(trace_key, str) and trace_key.startswith(GROUP_PREFIX)
