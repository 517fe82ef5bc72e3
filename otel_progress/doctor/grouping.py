"""Doctor check: tool calls without an agent span that name no conversation.

A tool span that is the root of its trace (an MCP client, OpenLLMetry's MCP
instrumentation, a script calling tools) joins a run only with the calls of the
conversation it names (``gen_ai.conversation.id``, ``session.id``: see
:mod:`otel_progress.conventions.grouping` and docs/runs.md). When the watched run's tool
calls are each alone in a trace and name none, each is a run of its own and a loop across
them cannot be seen: this check says so, and which attribute makes grouping exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..conventions.grouping import EXACT_ATTRIBUTE, SESSION_KEYS
from .checks import WARNING, Finding

__all__ = ["grouping_findings"]


def grouping_findings(report: Mapping[str, Any] | None) -> list[Finding]:
    """The finding on a watched run's tool spans (``report``: the run's report), if any."""
    if not report:
        return []
    rows: Sequence[Mapping[str, Any]] = report.get("tools") or ()
    if len(rows) < 2:
        return []
    traces = {row.get("trace_id") for row in rows}
    if len(traces) < len(rows):
        return []  # tool calls share traces: they are grouped by their trace (and agent span)
    if any(key in (row.get("attribute_keys") or ()) for row in rows for key in SESSION_KEYS):
        return []
    return [Finding(WARNING, "grouping", f"each of the {len(rows)} tool calls is alone in a trace of its own and"
                    " names no conversation, so each is a run of its own: a loop across them cannot be detected"
                    " (calls are never grouped by process or connection, which serve many conversations)",
                    f"set {EXACT_ATTRIBUTE} on the tool spans, e.g. put it in the baggage"
                    " (opentelemetry.baggage.set_baggage) and add BaggageSpanProcessor from"
                    " opentelemetry-processor-baggage to the tracer provider; or run each conversation"
                    " under one span (see docs/runs.md)")]
