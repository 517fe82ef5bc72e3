"""Replaying spans read after the fact: the order of observations, and one trace's replay.

Spans read from an export (``scan``) or a request (``serve``) arrive ended, in any order.
Each becomes the observations the in-process processor would have made while it ran
(:func:`observations`): a tool call's start and end, a model call's start and end, an agent
invocation's end. They are replayed in time order, and at one instant in the order the
processor sees them: ends of tool and model calls first, then agent ends, then starts (a
span of zero length starts before it ends). :data:`STEPS` maps each kind to what it does
to its run (through :class:`~otel_progress.runs.model.RunModel`):

=============== =============================================================================
``TOOL_START``  the run has one more tool call in flight
``TOOL_END``    the call is observed; its run is flushed when no other call is in flight
``MODEL_START`` the run's buffered calls are a complete step (flush); a span that marks a
                compaction (:class:`~otel_progress.conventions.spans.CompactionMarks`) is a boundary of
                its run
``MODEL_END``   the run's tokens grow by the call's usage; the call's output (its text,
                reasoning, requested tool calls: :func:`~otel_progress.conventions.read_model_output`)
                is observed (a model call nested in a tool call is the tool's, not a step)
``AGENT_END``   the run ends (its summary; the run-scope signature of a sub-agent)
=============== =============================================================================

Adding a kind of observation is a constant, a line in :func:`observations` (what produces
it) and a handler in :data:`STEPS`.

:class:`Replay` is one trace's replay context (its lineage, the calls in flight, where
root tool calls of a grouped run go); :func:`replay_trace` replays a whole trace at once
(``scan``, and :func:`otel_progress.scan.analyse.analyse_trace`); the service replays a trace a
request at a time (:mod:`.traces`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from ..conventions import is_candidate, own_trace, read_model_output
from ..conventions.spans import (
    CompactionMarks,
    Lineage,
    SpanKind,
    SpanRecord,
    read_input_tokens,
    read_tokens,
    read_tool_call,
    run_group,
)
from ..conventions.verdicts import read_span_verdicts
from ..engine import RunSummary
from ..model import Detection, ToolCall
from .causal import Times, causal_times
from .identity import span_session
from .model import RunModel

__all__ = [
    "AGENT_END",
    "MODEL_END",
    "MODEL_START",
    "STEPS",
    "TOOL_END",
    "TOOL_START",
    "Observation",
    "Replay",
    "TraceReport",
    "in_replay_order",
    "observations",
    "replay_trace",
]

TOOL_START, TOOL_END, MODEL_START, MODEL_END, AGENT_END = range(5)
_END_RANK, _AGENT_RANK, _START_RANK, _CAUSED_START_RANK, _LATE_END_RANK = range(5)

#: One observation: ``(time_ns, rank, span_id, kind, span)``; sorted as tuples, they are in
#: replay order.
Observation = tuple[int, int, str, int, SpanRecord]


def observations(span: SpanRecord, kind: SpanKind, times: Times | None = None) -> list[Observation]:
    """The observations a span stands for (``times``: its causal times, when its own
    cannot order it, see :mod:`.causal`)."""
    sid = span.span_id
    if kind is SpanKind.TOOL or kind is SpanKind.MODEL:
        start, end = (span.start_ns, span.end_ns) if times is None else (times.start, times.end)
        started, ended = (TOOL_START, TOOL_END) if kind is SpanKind.TOOL else (MODEL_START, MODEL_END)
        # (a span of zero length ends after it started: after the other starts of the instant;
        # a span caused by one starting at the same instant starts after it)
        rank = _CAUSED_START_RANK if times is not None and times.caused else _START_RANK
        return [(start, rank, sid, started, span),
                (end, _LATE_END_RANK if end <= start else _END_RANK, sid, ended, span)]
    if kind is SpanKind.AGENT:
        return [(span.end_ns, _AGENT_RANK, sid, AGENT_END, span)]
    return []


@dataclass
class TraceReport:
    """What a trace produced: its detections (in order) and a summary per run."""

    trace_id: str
    detections: list[Detection] = field(default_factory=list)
    runs: list[RunSummary] = field(default_factory=list)
    tool_calls: int = 0
    #: spans that could not be read, as ``(span_id, reason)``: left out of the analysis
    skipped: list[tuple[str, str]] = field(default_factory=list)
    #: the grouped runs (:func:`~otel_progress.conventions.spans.run_group` keys) this trace's root tool
    #: calls joined, with the detections those calls brought here (a grouped run outlives
    #: the trace: it is ended with ``end_trace(key)`` when its input is done)
    groups: dict[str, list[Detection]] = field(default_factory=dict)


#: ``group(key, call, span)``: a root tool call of a grouped run; returns its detections
#: (None: observe it at once, flushed).
GroupSink = Callable[[str, ToolCall, SpanRecord], "list[Detection] | None"]


class Replay:
    """One trace's replay context: the run model, the trace's lineage, the calls in flight
    per run, the grouped runs its root tool calls joined (see the module docstring).

    ``resolve(parent_id)`` gives ``(run_id, agent, node, nested)`` for a span with that
    parent (default: the lineage's), ``parent_run(agent span id)`` the run an agent was
    invoked from; ``group`` receives the root tool calls of grouped runs; ``marks``: the
    trace's compaction marks so far (a trace replayed a request at a time keeps one)."""

    def __init__(self, model: RunModel, trace_id: str, lineage: Lineage, report: TraceReport, *,
                 resolve: Callable[[str], tuple[str, str | None, str | None, bool]] | None = None,
                 parent_run: Callable[[str], str | None] | None = None, group: GroupSink | None = None,
                 marks: CompactionMarks | None = None) -> None:
        self.model = model
        self.marks = marks if marks is not None else CompactionMarks()
        self.trace_id = trace_id
        self.lineage = lineage
        self.report = report
        self.resolve = resolve or lineage.resolve
        self.parent_run = parent_run or lineage.parent_run
        self.group = group
        self.open_tools: dict[str, int] = {}
        self.touched: dict[str, None] = {}  # runs given calls or tokens (flushed by the service per request)

    def run(self, observations: Iterable[Observation]) -> None:
        """Replay observations (already in order); a span that raises is reported in
        ``report.skipped`` and left out."""
        steps = STEPS
        for obs in observations:
            try:
                steps[obs[3]](self, obs[4])
            except Exception as exc:  # a span no reader can make sense of: skipped, reported
                self.report.skipped.append((obs[2], why(exc)))

    def found(self, dets: Iterable[Detection]) -> None:
        self.report.detections.extend(dets)

    # -- the steps ----------------------------------------------------------------------------

    def tool_start(self, span: SpanRecord) -> None:
        run_id, _agent, _node, nested = self.resolve(span.parent_id)
        if not nested:
            self.open_tools[run_id] = self.open_tools.get(run_id, 0) + 1

    def tool_end(self, span: SpanRecord) -> None:
        run_id, agent, node, nested = self.resolve(span.parent_id)
        if nested:
            return  # counted once, as the outer call
        left = self.open_tools[run_id] = max(0, self.open_tools.get(run_id, 0) - 1)
        self.report.tool_calls += 1
        model = self.model
        # A root tool call (or one its producer gives a trace of its own, under a parent that
        # is no agent): the run of the conversation it names.
        group = run_group(span) if not run_id or (own_trace(span) and self.lineage.kind(run_id) is not
                                                  SpanKind.AGENT) else None
        call = read_tool_call(span, run_id="" if group else run_id, agent=agent, node=node, trace_key=group)
        session = span_session(span.attributes)
        if span.events:
            self.verdicts(span, group or self.trace_id, "" if group else run_id)
        if group is None:
            self.touched[run_id] = None
            self.found(model.tool(call, flush=left == 0, session=session))
            return
        held = self.group(group, call, span) if self.group is not None else None
        if held is None:
            held = [replace(d, trace_id=span.trace_id) for d in model.tool(call, flush=True, session=session)]
            model.tag_all(held, session)
        self.report.groups.setdefault(group, []).extend(held)

    def model_start(self, span: SpanRecord) -> None:
        run_id, agent, _node, _nested = self.resolve(span.parent_id)
        self.found(self.model.flush(self.trace_id, run_id))
        compaction = self.marks.at(span, self.trace_id, run_id, agent)
        if compaction is not None:
            self.touched[run_id] = None
            self.found(self.model.compaction(compaction))

    def model_end(self, span: SpanRecord) -> None:
        run_id, agent, _node, nested = self.resolve(span.parent_id)
        if span.events:
            self.verdicts(span, self.trace_id, run_id)
        tokens, input_tokens = read_tokens(span), read_input_tokens(span)
        if tokens > 0 or input_tokens > 0:
            self.touched[run_id] = None
            self.model.tokens(self.trace_id, run_id, tokens, input_tokens)
        output = None if nested else read_model_output(span, run_id=run_id, agent=agent, trace_key=self.trace_id)
        if output is not None:
            self.touched[run_id] = None
            self.found(self.model.model_output(output))

    def agent_end(self, span: SpanRecord) -> None:
        if span.events:
            self.verdicts(span, self.trace_id, span.span_id)
        dets, summary = self.model.end_run(self.trace_id, span.span_id, span_id=span.span_id,
                                           parent_run=self.parent_run(span.span_id),
                                           conversation=span_session(span.attributes))
        self.touched.pop(span.span_id, None)
        self.found(dets)
        if summary is not None and (summary.turns or summary.detections):
            self.report.runs.append(summary)

    def verdicts(self, span: SpanRecord, trace: str, run: str) -> None:
        """Keep the other detectors' verdicts in a span's events (read when it ends, before
        what it completes: its events happened before its end) with the run they are on."""
        for verdict in read_span_verdicts(span):
            self.model.verdict(verdict, trace, run)

    def finish(self) -> None:
        """The trace is over: end its runs still open."""
        dets, summaries = self.model.end_trace(self.trace_id)
        self.found(dets)
        self.report.runs.extend(s for s in summaries if s.turns or s.detections)


#: What each kind of observation does (see the module docstring).
STEPS: dict[int, Callable[[Replay, SpanRecord], None]] = {
    TOOL_START: Replay.tool_start,
    TOOL_END: Replay.tool_end,
    MODEL_START: Replay.model_start,
    MODEL_END: Replay.model_end,
    AGENT_END: Replay.agent_end,
}


def why(exc: BaseException) -> str:
    """A one-line reason for a span that could not be used."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 120 else text[:117] + "..."


def timeline(spans: Iterable[SpanRecord], lineage: Lineage, report: TraceReport) -> list[Observation]:
    """Register the spans in the lineage and return their observations in replay order;
    a span no reader can make sense of is reported in ``report.skipped``."""
    kinds: list[tuple[SpanRecord, SpanKind]] = []
    for span in spans:
        try:
            kinds.append((span, lineage.add_record(span)))
        except Exception as exc:
            report.skipped.append((span.span_id, why(exc)))
    return in_replay_order(kinds)


def in_replay_order(spans: Sequence[tuple[SpanRecord, SpanKind]]) -> list[Observation]:
    """The observations of the spans (with their kinds) in replay order: by time, in causal
    order where the clock cannot tell (:func:`~.causal.causal_times`)."""
    causal = causal_times(spans)
    out: list[Observation] = []
    for span, kind in spans:
        out.extend(observations(span, kind, causal.get(span.span_id) if causal else None))
    out.sort(key=_order)
    return out


def _order(obs: Observation) -> tuple[int, int, str]:
    return obs[0], obs[1], obs[2]


def replay_trace(spans: Iterable[SpanRecord], model: RunModel, *, group: GroupSink | None = None) -> TraceReport:
    """Replay one whole trace through the model, then end it (its state is freed). A trace
    without a candidate span (:func:`~otel_progress.conventions.is_candidate`: no span a
    convention could call a tool, agent or model call) has nothing to replay: it is only
    ended."""
    records = list(spans)
    report = TraceReport(records[0].trace_id if records else "")
    lineage = Lineage(max_spans=max(len(records) * 2, 16))
    replay = Replay(model, report.trace_id, lineage, report, group=group)
    if any(is_candidate(span.attributes, span.name) for span in records):
        replay.run(timeline(records, lineage, report))
    replay.finish()
    return report
