"""Analysing complete traces: the shared path of ``otel-progress scan`` and the tests.

:func:`analyse_trace` replays one trace's spans through the engine in time order: model
calls add their tokens to their run (and mark the previous tool batch complete), tool
calls are observed, agent invocations end their runs (sub-agents evaluate the run-scope
signature). The processor and the service do the same incrementally.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .engine import ProgressEngine, RunSummary
from .model import Detection
from .spans import Lineage, SpanKind, SpanRecord, read_tokens, read_tool_call

__all__ = ["TraceReport", "analyse_trace"]


@dataclass
class TraceReport:
    """What a trace produced: its detections (in order) and a summary per run."""

    trace_id: str
    detections: list[Detection] = field(default_factory=list)
    runs: list[RunSummary] = field(default_factory=list)
    tool_calls: int = 0


def analyse_trace(spans: Iterable[SpanRecord], engine: ProgressEngine) -> TraceReport:
    """Run one trace's spans through ``engine`` and free its state afterwards."""
    records = list(spans)
    trace_id = records[0].trace_id if records else ""
    report = TraceReport(trace_id)
    lineage = Lineage(max_spans=max(len(records) * 2, 16))
    kinds: dict[str, SpanKind] = {}
    for span in records:
        kinds[span.span_id] = lineage.add_record(span)
    # (time, order, kind, span): model calls at their start (the previous batch is then
    # complete), tool calls at their start, agent ends at their end.
    timeline: list[tuple[int, int, SpanKind, SpanRecord]] = []
    for span in records:
        kind = kinds[span.span_id]
        if kind is SpanKind.TOOL or kind is SpanKind.MODEL:
            timeline.append((span.start_ns, 1, kind, span))
        elif kind is SpanKind.AGENT:
            timeline.append((span.end_ns, 2, kind, span))
    timeline.sort(key=lambda t: (t[0], t[1], t[3].span_id))
    for _, _, kind, span in timeline:
        run_id, agent, node, nested = lineage.resolve(span.parent_id)
        if kind is SpanKind.TOOL:
            if nested:
                continue
            report.tool_calls += 1
            call = read_tool_call(span, run_id=run_id, agent=agent, node=node)
            report.detections.extend(engine.observe(call))
        elif kind is SpanKind.MODEL:
            report.detections.extend(engine.flush(trace_id, run_id))
            engine.record_tokens(trace_id, run_id, read_tokens(span))
        else:
            summary = engine.end_run(trace_id, span.span_id, span_id=span.span_id,
                                     parent_run_id=lineage.parent_run(span.span_id))
            if summary is not None:
                report.detections.extend(summary.detections_list)
                if summary.turns or summary.detections:
                    report.runs.append(summary)
    for summary in engine.end_trace(trace_id):
        report.detections.extend(summary.detections_list)
        if summary.turns or summary.detections:
            report.runs.append(summary)
    return report
