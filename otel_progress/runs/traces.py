"""A trace a request at a time (``otel-progress serve``): the service's driver of the run model.

A request brings spans of many traces, each trace's spans spread over many requests, in
the order they ended: a tool span before its agent span, a late span of another service
after its trace's root. :class:`TraceTable` keeps per trace what the replay needs (the
lineage, the spans held for the merge window, the runs named so far) and replays each
request's spans in time order (:mod:`.replay`), flushing the runs a request touched at its
end, so a detection lands in the request that completed its step.

**Provisional runs.** A span whose ancestors have not arrived yet (its agent span ends
after it) is put in the run of its first unknown ancestor; when that ancestor arrives the
guess is settled (:class:`~.provisional.ProvisionalRuns`). A guess that turns out wrong
is a **conflict**.

**Merge window.** A trace's spans are held (as the adapter gives them: the service holds
their bytes) for ``merge_window`` seconds after its latest span, within the memory budget.
A request that brings a conflict, or a span older than what was already replayed (a late
span: another service's export, a sibling of a parallel step in the next request), makes
the trace be analysed again whole, as ``scan`` analyses it; the detections not reported
yet are reported, each detection once. Past the window, or once the trace's held spans
were dropped for the budget, late spans are replayed as they come (and counted late).

**Completion and budget.** A trace closes ``close_delay`` seconds after its root span
arrived without newer spans, or ``trace_ttl`` seconds idle, or when evicted past
``max_traces`` or the memory budget (:class:`~.opentraces.OpenTraces`, which holds each
trace's :class:`~.opentraces.TraceState`). Closing ends its runs through the run model
(summaries, wasted turns). A closed trace's id is remembered so a span of it arriving
later is counted late. Grouped runs end when idle (:class:`~.groups.IdleGroups`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..conventions.spans import CompactionMarks, SpanKind, SpanRecord, agent_name
from ..engine import RunSummary
from ..model import Detection, Scope
from .budget import StateBudget
from .groups import IdleGroups
from .model import RunModel
from .opentraces import OpenTraces, TraceState
from .provisional import ProvisionalRuns
from .replay import Observation, Replay, TraceReport, in_replay_order

__all__ = ["Arrival", "Outcome", "TraceTable"]

_MAX_PENDING = 64
_MAX_RUNS_COUNTED = 64


@dataclass(slots=True)
class Arrival:
    """One GenAI span of a request, as the adapter gives it: its record and kind, the
    adapter's handle (``ref``: where the span is in its request), what to hold for a second
    analysis (``keep``: decoded with the table's ``decode``; default the record itself) and
    its size in bytes."""

    record: SpanRecord
    kind: SpanKind
    ref: Any = None
    keep: Any = None
    size: int = 0


@dataclass
class Outcome:
    """What one chunk of a request produced."""

    fresh: list[Arrival] = field(default_factory=list)
    #: spans seen before (a retried request), with the detections placed on them then
    repeated: list[tuple[Arrival, tuple[Detection, ...]]] = field(default_factory=list)
    detections: list[Detection] = field(default_factory=list)
    #: agent spans of the request, with the run's detections to repeat on them
    on_agents: list[tuple[Arrival, list[Detection]]] = field(default_factory=list)
    #: detections of runs whose agent span arrived in an earlier request (it is gone: each
    #: is annotated on it by an annotation span, its child)
    after_agent: list[Detection] = field(default_factory=list)
    late: int = 0
    tool_calls: int = 0
    merged: int = 0


class TraceTable:
    """The service's driver of the run model over its open traces (see the module
    docstring): each request's spans replayed after their traces' earlier ones, or the
    trace analysed again whole; each detection reported once.

    ``on_close(why, reason)``: a trace left the state (``why``: ``completed``,
    ``expired``, ``evicted_early``; ``reason``: ``max_traces`` or ``memory_budget`` for an
    early eviction). ``decode(keep)``: the record of a held span. ``on_summary``: every
    run that ended, once.
    """

    def __init__(self, model: RunModel, *, max_traces: int = 10_000, max_spans: int = 10_000,
                 trace_ttl: float = 300.0, close_delay: float = 30.0, merge_window: float = 10.0,
                 budget: StateBudget | None = None, decode: Callable[[Any], SpanRecord] | None = None,
                 on_close: Callable[[str, str], None] | None = None,
                 on_summary: Callable[[RunSummary], None] | None = None) -> None:
        self.model = model
        self.engine = model.engine
        model.on_summary = self._summary
        self.max_spans = max_spans
        self.decode = decode or (lambda keep: keep)
        self.on_summary = on_summary
        self.open = OpenTraces(
            max_traces=max_traces, max_spans=max_spans, trace_ttl=trace_ttl, close_delay=close_delay,
            merge_window=merge_window, budget=budget if budget is not None else StateBudget(1 << 62),
            end_runs=self._end_runs, on_close=on_close or (lambda why, reason: None))
        self.traces = self.open.traces  # (the open traces by id: the service counts them)
        self.provisional = ProvisionalRuns(self.engine)
        self.groups = IdleGroups(model)
        self._current: TraceState | None = None  # the trace being replayed (for _summary)

    @property
    def held_bytes(self) -> int:
        """Estimated bytes of the traces in state and the ids of closed traces."""
        return self.open.held_bytes

    # -- a request ----------------------------------------------------------------------------

    def replay(self, arrivals: Sequence[Arrival], lineage_only: Sequence[tuple[str, str, str, str]],
               now: float | None = None, let_others_in: Callable[[], None] | None = None) -> Outcome:
        """Replay one chunk of a request: its GenAI spans (``arrivals``) and the other spans
        it holds that the lineage needs (``lineage_only``: ``(trace_id, span_id, parent_id,
        name)``)."""
        now = time.monotonic() if now is None else now
        out = Outcome()
        by_trace: dict[str, list[Arrival]] = {}
        for arrival in arrivals:
            by_trace.setdefault(arrival.record.trace_id, []).append(arrival)
        states: dict[str, TraceState] = {}
        for trace_id, group in by_trace.items():
            states[trace_id], reopened = self.open.get(trace_id, now)
            if reopened:
                out.late += len(group)
        registered: dict[str, list[str]] = {}
        for trace_id, span_id, parent, name in lineage_only:
            st = states.get(trace_id)
            if st is None or span_id in st.seen or span_id in st.lineage:
                continue
            st.register(span_id, parent, SpanKind.OTHER, name)
            registered.setdefault(trace_id, []).append(span_id)
            if not parent:
                self.open.mark_complete(st, now)
        for trace_id, group in by_trace.items():
            self._replay_trace(states[trace_id], group, registered.get(trace_id, []), out, now)
            if let_others_in is not None:
                let_others_in()
        self.open.recount(states.values())
        return out

    def _replay_trace(self, st: TraceState, group: list[Arrival], registered: list[str], out: Outcome,
                      now: float) -> None:
        fresh = self._fresh(st, group, out, registered, now)
        obs = in_replay_order([(arrival.record, arrival.kind) for arrival in fresh])
        conflict = any([self.provisional.settle(st, span_id) for span_id in registered if span_id in st.open])
        late = bool(obs) and st.cursor is not None and _order(obs[0]) < st.cursor
        self._current = st
        try:
            if (conflict or late) and st.held is not None:
                dets = self._again(st)
                out.merged += 1
            else:
                dets = self._append(st, obs, out)
        finally:
            self._current = None
        if obs and (st.cursor is None or _order(obs[-1]) > st.cursor):
            st.cursor = _order(obs[-1])
        self._report(st, dets, fresh, out)

    def _fresh(self, st: TraceState, group: list[Arrival], out: Outcome, registered: list[str],
               now: float) -> list[Arrival]:
        """The spans not seen before (retries are set aside with their old detections),
        registered in the lineage and held."""
        fresh: list[Arrival] = []
        in_batch: set[str] = set()
        for arrival in group:
            rec = arrival.record
            previous = st.seen.get(rec.span_id)
            if previous is not None or rec.span_id in in_batch:
                out.repeated.append((arrival, previous or ()))
                continue
            in_batch.add(rec.span_id)
            fresh.append(arrival)
            st.register(rec.span_id, rec.parent_id, arrival.kind, rec.name,
                        agent_name(rec) if arrival.kind is SpanKind.AGENT else None)
            registered.append(rec.span_id)
            if not rec.parent_id:
                self.open.mark_complete(st, now)
        self.open.hold(st, fresh)
        for arrival in fresh:
            st.seen[arrival.record.span_id] = ()
        while len(st.seen) > self.max_spans:
            st.seen.popitem(last=False)
        return fresh

    def _replay_context(self, st: TraceState, report: TraceReport, provisional: bool = True) -> Replay:
        if not provisional:
            return Replay(self.model, st.trace_id, st.lineage, report, marks=st.marks)
        runs = self.provisional
        return Replay(self.model, st.trace_id, st.lineage, report, resolve=lambda p: runs.resolve(st, p),
                      parent_run=lambda a: runs.parent_run(st, a), marks=st.marks)

    def _append(self, st: TraceState, obs: list[Observation], out: Outcome) -> list[Detection]:
        """Replay a request's observations after the trace's earlier ones."""
        report = TraceReport(st.trace_id)
        replay = self._replay_context(st, report)
        replay.run(obs)
        self._end_request(st, replay)
        out.tool_calls += report.tool_calls
        st.calls += report.tool_calls
        for key in report.groups:
            self.groups.seen(key, st.last_seen)
        return report.detections + [d for dets in report.groups.values() for d in dets]

    def _end_request(self, st: TraceState, replay: Replay) -> None:
        """The request is done: the runs it touched are flushed (their steps complete)."""
        for run in replay.touched:
            replay.found(self.model.flush(st.trace_id, run))
            if len(st.runs) < _MAX_RUNS_COUNTED:
                st.runs.add(run)

    def _again(self, st: TraceState, provisional: bool = True) -> list[Detection]:
        """Analyse the trace again, whole, from its held spans (a late span, a conflict);
        its detections (the caller reports those not reported yet)."""
        self.engine.discard_trace(st.trace_id)  # (the replay below starts afresh)
        report = TraceReport(st.trace_id)
        kinds: list[tuple[SpanRecord, SpanKind]] = []
        for keep in st.held or ():
            rec = self.decode(keep)
            kind = st.lineage.kind(rec.span_id)
            if kind is not None:
                kinds.append((rec, kind))
        obs = in_replay_order(kinds)
        st.open.clear()
        st.marks = CompactionMarks()
        replay = self._replay_context(st, report, provisional)
        replay.run(obs)
        self._end_request(st, replay)
        if obs:
            st.cursor = _order(obs[-1])
        return report.detections + [d for dets in report.groups.values() for d in dets]

    def _report(self, st: TraceState, dets: list[Detection], fresh: list[Arrival], out: Outcome) -> None:
        """Each detection once; agent-scope ones also wait for their run's agent span."""
        in_request = {a.record.span_id for a in fresh if a.kind is SpanKind.AGENT}
        for det in self.model.reported(dets):
            if not st.first_report(det):
                continue
            out.detections.append(det)
            if det.scope is Scope.AGENT and det.run_id not in in_request and det.run_id in st.seen \
                    and st.lineage.kind(det.run_id) is SpanKind.AGENT:
                out.after_agent.append(det)  # (its agent span came in an earlier request)
            elif det.scope is Scope.AGENT:
                pending = st.pending.setdefault(det.run_id, [])
                if len(pending) < _MAX_PENDING:
                    pending.append(det)
        out.fresh.extend(fresh)
        for arrival in fresh:
            if arrival.kind is SpanKind.AGENT:
                mine = st.pending.pop(arrival.record.span_id, [])
                if mine:
                    out.on_agents.append((arrival, mine))

    # -- runs that end ------------------------------------------------------------------------

    def _summary(self, summary: RunSummary) -> None:
        """A run ended: summarised once per trace (``_current``: the trace whose runs end)."""
        st = self._current
        if st is not None:
            if summary.run_id in st.summarised:
                return  # (a trace analysed again: its ended runs are summarised once)
            st.summarised.add(summary.run_id)
        if self.on_summary is not None:
            self.on_summary(summary)

    def _end_runs(self, trace_id: str, st: TraceState) -> list[Detection]:
        """A trace left the state: its runs end (through the run model); the detections
        not reported yet."""
        self._current = st
        try:
            dets, _summaries = self.model.end_trace(trace_id)
        finally:
            self._current = None
        return [d for d in self.model.reported(dets) if st.first_report(d)]

    def maintain(self, now: float | None = None) -> list[Detection]:
        """Expire idle traces, close completed ones, drop held spans past the merge window
        (call about once a second). Returns the detections found on the way (runs that
        ended with their trace): they have no request to go in."""
        now = time.monotonic() if now is None else now
        table = self.open
        out = table.take_orphans()
        out += table.expire(now)
        for st in table.due(now):
            out += self._final(st)
            del table.traces[st.trace_id]
            out += table.close(st.trace_id, st, "completed")
        out += self.groups.end_idle(now - self.engine.config.run_ttl_seconds)
        table.drop_held(now)
        return out

    def _final(self, st: TraceState) -> list[Detection]:
        """A completed trace some of whose calls are still in provisional runs of ancestors
        that never arrived: analysed again as a whole trace is (those calls in the trace's
        own run), its new detections reported."""
        if st.held is None or self.provisional.unsettled(st) < 2:
            return []
        self._current = st
        try:
            dets = self._again(st, provisional=False)
        finally:
            self._current = None
        return [d for d in self.model.reported(dets) if st.first_report(d)]

    # -- views ------------------------------------------------------------------------------

    def known(self, limit: int = 100_000) -> dict[str, list[str]]:
        """Ids of the traces in state and of the closed ones remembered."""
        return self.open.known(limit)

    def spans(self) -> int:
        """Spans in the lineages of the traces in state."""
        return self.open.spans()

    def placed(self, trace_id: str, span_id: str, dets: tuple[Detection, ...]) -> None:
        """The adapter placed these detections on a span (re-placed on a retry)."""
        self.open.placed(trace_id, span_id, dets)


def _order(obs: Observation) -> tuple[int, int, str]:
    return obs[0], obs[1], obs[2]
