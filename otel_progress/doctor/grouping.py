"""Doctor check: tool calls that cannot form runs (root tool spans naming no conversation).

A tool span that is the root of its trace (no parent span, so no agent span above it: an
MCP client, OpenLLMetry's MCP instrumentation, a script calling tools) joins a run only
with the calls of the conversation it names (``gen_ai.conversation.id``, ``session.id``:
see :mod:`otel_progress.conventions.grouping` and docs/runs.md). When the watched run has
such calls naming none, in the number and time the run-time warning of the processor and
``serve`` needs (:mod:`otel_progress.runs.ungrouped`: 3 within 5 minutes), each is a run of
its own and a loop across them cannot be seen: this check says so, and what to add.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..conventions.grouping import EXACT_ATTRIBUTE, SESSION_KEYS, names_conversation
from ..conventions.record import SpanRecord
from ..runs.ungrouped import UngroupedWatch
from .checks import WARNING, Finding

__all__ = ["grouping_findings", "ungrouped_fields"]


def ungrouped_fields(span: SpanRecord) -> dict[str, Any]:
    """What the watched run's report keeps of a tool span for this check."""
    return {"parent_id": span.parent_id, "end_ns": span.end_ns,
            "names_conversation": names_conversation(span.attributes)}


def _ungrouped(row: Mapping[str, Any]) -> bool:
    """A root tool span naming no conversation (a row without the fields: by its keys)."""
    if row.get("parent_id"):
        return False
    named = row.get("names_conversation")
    if named is None:
        named = any(key in (row.get("attribute_keys") or ()) for key in SESSION_KEYS)
    return not named


def grouping_findings(report: Mapping[str, Any] | None) -> list[Finding]:
    """The finding on a watched run's tool spans (``report``: the run's report), if any."""
    if not report:
        return []
    rows: Sequence[Mapping[str, Any]] = report.get("tools") or ()
    watch = UngroupedWatch()
    traces: set[Any] = set()
    met = False
    for row in rows:
        if not _ungrouped(row) or row.get("trace_id") in traces:
            continue  # (one root per trace: a second row of a trace is not a root)
        traces.add(row.get("trace_id"))
        met = watch.seen("", int(row.get("end_ns") or 0)).warn or met
    if not met:
        return []
    return [Finding(WARNING, "grouping", f"{len(traces)} tool calls are each alone in a trace of its own (the"
                    " root span, no agent span above it) and name no conversation, so each is a run of its own:"
                    " a loop across them cannot be detected (calls are never grouped by process or connection,"
                    " which serve many conversations)",
                    f"set {EXACT_ATTRIBUTE} on the tool spans, e.g. put it in the baggage"
                    " (opentelemetry.baggage.set_baggage) and add BaggageSpanProcessor from"
                    " opentelemetry-processor-baggage to the tracer provider; or call the tools of one"
                    " conversation under an invoke_agent span (or any span of your own) so that they share a"
                    " trace (see docs/runs.md)")]
