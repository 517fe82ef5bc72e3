"""Run identity: which run an observation belongs to, and which agent session.

A run is identified for the engine by a pair of keys, ``(trace key, run id)``:

* a span inside an agent invocation belongs to the run of its nearest ``invoke_agent``
  ancestor: ``(trace id, agent span id)``;
* a span of a trace outside any agent belongs to the trace's own run: ``(trace id, "")``;
* a tool span without an agent and without a parent (or one its producer gives a trace
  of its own, see :func:`~otel_progress.conventions.grouping.own_trace`) belongs to the
  run of its conversation or session when it names one (:func:`group_key`:
  ``("group:<attribute>=<value>", "")``), else to its trace's run;
* a log record belongs to the run its agent's reader names (``run_key``, both keys).

The **agent session** (:func:`span_session`, :func:`log_session`) is what ties the runs of
one agent together across signals: a coding CLI that exports both logs and traces writes
the same session id in both. :class:`~otel_progress.runs.model.RunModel` uses it to
report one loop once (see :mod:`.signals`).

The **evidence rank** of a tool call (:func:`evidence_rank`) says how much its signal
lets the engine know: content (arguments and the whole result) over arguments over names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..conventions.grouping import group_key, is_group_key, own_trace
from ..model import NOT_CAPTURED, ToolCall

__all__ = [
    "EVIDENCE_RANK",
    "LOG_SESSION_ATTRIBUTES",
    "SPAN_SESSION_ATTRIBUTES",
    "evidence_rank",
    "group_key",
    "is_group_key",
    "log_session",
    "own_trace",
    "span_session",
]

#: Span attributes naming the agent session (a coding CLI's session, a chat conversation).
SPAN_SESSION_ATTRIBUTES = ("gen_ai.conversation.id", "session.id")
#: Log record attributes naming the agent session (Codex CLI: ``conversation.id``).
LOG_SESSION_ATTRIBUTES = ("session.id", "conversation.id", "gen_ai.conversation.id")
#: ``ToolCall.evidence_level`` -> rank (higher: richer).
EVIDENCE_RANK = {"full": 3, "arguments": 2, "names": 1}
_MAX_SESSION = 256


def _text(attributes: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = attributes.get(key)
        if type(value) is str and value:
            return value[:_MAX_SESSION]
    return None


def span_session(attributes: Mapping[str, Any]) -> str | None:
    """The agent session a span names (``gen_ai.conversation.id``, ``session.id``), or None."""
    return _text(attributes, SPAN_SESSION_ATTRIBUTES)


def log_session(attributes: Mapping[str, Any]) -> str | None:
    """The agent session a log record names (``session.id``, ``conversation.id``), or None."""
    return _text(attributes, LOG_SESSION_ATTRIBUTES) if isinstance(attributes, Mapping) else None


def evidence_rank(call: ToolCall) -> int:
    """How much a tool call lets the engine know: 3 (its arguments and whole result), 2
    (arguments; the result missing, a size or a truncated preview) or 1 (names only)."""
    level = EVIDENCE_RANK.get(call.evidence_level, 3)
    if level == 3:
        if call.arguments is NOT_CAPTURED and call.result is NOT_CAPTURED:
            return 1
        if call.result is NOT_CAPTURED or call.result_truncated:
            return 2
    return level
