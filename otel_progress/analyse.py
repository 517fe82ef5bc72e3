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
    """Run one trace's spans through ``engine`` and free its state afterwards.

    The replay follows the in-process processor's view of time, so both give the same
    detections: a tool call is observed when it ends, and its run is flushed when no
    other tool call of the run is still open; a model call flushes its run when it starts
    and adds its tokens when it ends; an agent invocation ends its run when it ends.
    """
    records = list(spans)
    trace_id = records[0].trace_id if records else ""
    report = TraceReport(trace_id)
    lineage = Lineage(max_spans=max(len(records) * 2, 16))
    kinds = {span.span_id: lineage.add_record(span) for span in records}
    # (time, order, action, span): at one instant, call ends, then agent ends, then starts.
    _END, _AGENT_END, _START = 0, 1, 2
    timeline: list[tuple[int, int, str, SpanRecord]] = []
    for span in records:
        kind = kinds[span.span_id]
        if kind is SpanKind.TOOL:
            timeline.append((span.start_ns, _START, "tool_start", span))
            timeline.append((span.end_ns, _END, "tool_end", span))
        elif kind is SpanKind.MODEL:
            timeline.append((span.start_ns, _START, "model_start", span))
            timeline.append((span.end_ns, _END, "model_end", span))
        elif kind is SpanKind.AGENT:
            timeline.append((span.end_ns, _AGENT_END, "agent_end", span))
    timeline.sort(key=lambda t: (t[0], t[1], t[3].span_id))
    open_tools: dict[str, int] = {}
    for _, _, action, span in timeline:
        run_id, agent, node, nested = lineage.resolve(span.parent_id)
        if action == "tool_start":
            if not nested:
                open_tools[run_id] = open_tools.get(run_id, 0) + 1
        elif action == "tool_end":
            if nested:
                continue
            open_tools[run_id] = max(0, open_tools.get(run_id, 0) - 1)
            report.tool_calls += 1
            call = read_tool_call(span, run_id=run_id, agent=agent, node=node)
            report.detections.extend(engine.observe(call, flush=open_tools[run_id] == 0))
        elif action == "model_start":
            report.detections.extend(engine.flush(trace_id, run_id))
        elif action == "model_end":
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
