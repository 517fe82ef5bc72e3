"""Analysing complete traces: the shared path of ``otel-progress scan`` and the tests.

:func:`analyse_trace` replays one trace's spans through the engine in time order: model
calls add their tokens to their run (and mark the previous tool batch complete; one that
marks a compaction is a boundary of its run, :class:`~otel_progress.spans.CompactionMarks`), tool
calls are observed, agent invocations end their runs (sub-agents evaluate the run-scope
signature). The processor and the service do the same incrementally.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from .engine import ProgressEngine, RunSummary
from .model import Detection
from .spans import CompactionMarks, Lineage, SpanKind, SpanRecord, read_tokens, read_tool_call, run_group

__all__ = ["RunRow", "TraceReport", "analyse_trace", "run_rows"]


@dataclass
class TraceReport:
    """What a trace produced: its detections (in order) and a summary per run."""

    trace_id: str
    detections: list[Detection] = field(default_factory=list)
    runs: list[RunSummary] = field(default_factory=list)
    tool_calls: int = 0
    #: spans that could not be read, as ``(span_id, reason)``: left out of the analysis
    skipped: list[tuple[str, str]] = field(default_factory=list)
    #: the client runs (:func:`~otel_progress.spans.run_group` keys) this trace's root tool
    #: calls joined, with the detections those calls brought (not in ``detections``: they
    #: belong to the client's run, which outlives the trace; end it with the engine's
    #: ``end_trace(key)`` when the input is done)
    groups: dict[str, list[Detection]] = field(default_factory=dict)


@dataclass(frozen=True)
class RunRow:
    """One agent run as every summary shows it (the scan's table, the HTML report): the
    engine's :class:`RunSummary` figures with the detections actually reported for the
    run (``detections``: both scopes; a run-scope detection belongs to the run the
    sub-agents were invoked from; findings past level 3, which are not reported, are
    not counted)."""

    trace_id: str
    run_id: str
    agent: str | None
    turns: int
    tokens: int
    detections: tuple[Detection, ...]
    first_detection_turn: int | None
    wasted_turns: int
    wasted_tokens: int

    @property
    def level(self) -> int:
        """The highest escalation level reported in the run (0: none)."""
        return max((int(d.level) for d in self.detections), default=0)


def run_rows(reports: Sequence[TraceReport]) -> list[RunRow]:
    """Every run of the reports, in report order, with the detections reported for it.
    A run with detections but no summary (only run-scope detections, on a run without
    tool calls of its own) gets a row with zero turns."""
    rows: list[RunRow] = []
    for rep in reports:
        by_run: dict[str, list[Detection]] = {}
        for d in rep.detections:
            by_run.setdefault(d.run_id, []).append(d)
        seen: set[str] = set()
        for s in rep.runs:
            seen.add(s.run_id)
            dets = tuple(by_run.get(s.run_id, ()))
            first = s.first_detection_turn
            if first is None and dets:
                first = min(d.turn for d in dets)
            rows.append(RunRow(rep.trace_id, s.run_id, s.agent, s.turns, s.tokens, dets, first,
                               s.wasted_turns, s.wasted_tokens))
        for run_id, dets in by_run.items():
            if run_id not in seen:
                rows.append(RunRow(rep.trace_id, run_id, dets[0].agent, 0, 0, tuple(dets),
                                   min(d.turn for d in dets), 0, 0))
    return rows


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
    kinds: dict[str, SpanKind] = {}
    readable: list[SpanRecord] = []
    for span in records:
        try:
            kinds[span.span_id] = lineage.add_record(span)
        except Exception as exc:  # a span no reader can make sense of: skipped, reported
            report.skipped.append((span.span_id, _why(exc)))
            continue
        readable.append(span)
    # (time, order, action, span): at one instant, call ends, then agent ends, then starts.
    _END, _AGENT_END, _START = 0, 1, 2
    timeline: list[tuple[int, int, str, SpanRecord]] = []
    for span in readable:
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
    marks = CompactionMarks()
    for _, _, action, span in timeline:
        try:
            _replay(action, span, lineage, engine, report, open_tools, trace_id, marks)
        except Exception as exc:  # as above: this span is left out, the rest goes on
            report.skipped.append((span.span_id, _why(exc)))
    for summary in engine.end_trace(trace_id):
        report.detections.extend(summary.detections_list)
        if summary.turns or summary.detections:
            report.runs.append(summary)
    return report


def _why(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 120 else text[:117] + "..."


def _replay(action: str, span: SpanRecord, lineage: Lineage, engine: ProgressEngine, report: TraceReport,
            open_tools: dict[str, int], trace_id: str, marks: CompactionMarks) -> None:
    """One step of :func:`analyse_trace`'s replay."""
    run_id, agent, node, nested = lineage.resolve(span.parent_id)
    if action == "tool_start":
        if not nested:
            open_tools[run_id] = open_tools.get(run_id, 0) + 1
    elif action == "tool_end":
        if nested:
            return
        open_tools[run_id] = max(0, open_tools.get(run_id, 0) - 1)
        report.tool_calls += 1
        group = run_group(span) if not run_id else None  # a root tool call: its client's run
        call = read_tool_call(span, run_id=run_id, agent=agent, node=node, trace_key=group)
        if group is None:
            report.detections.extend(engine.observe(call, flush=open_tools[run_id] == 0))
        else:
            report.groups.setdefault(group, []).extend(
                replace(d, trace_id=span.trace_id) for d in engine.observe(call, flush=True))
    elif action == "model_start":
        report.detections.extend(engine.flush(trace_id, run_id))
        compaction = marks.at(span, trace_id, run_id, agent)
        if compaction is not None:
            report.detections.extend(engine.compaction(compaction))
    elif action == "model_end":
        engine.record_tokens(trace_id, run_id, read_tokens(span))
    else:
        summary = engine.end_run(trace_id, span.span_id, span_id=span.span_id,
                                 parent_run_id=lineage.parent_run(span.span_id))
        if summary is not None:
            report.detections.extend(summary.detections_list)
            if summary.turns or summary.detections:
                report.runs.append(summary)

