"""A trace a request at a time (``otel-progress serve``): the service's driver of the run model.

A request brings spans of many traces, each trace's spans spread over many requests, in
the order they ended: a tool span before its agent span, a late span of another service
after its trace's root. :class:`TraceTable` keeps per trace what the replay needs (the
lineage, the spans held for the merge window, the runs named so far) and replays each
request's spans in time order (:mod:`.replay`), flushing the runs a request touched at its
end, so a detection lands in the request that completed its step.

**Provisional runs.** A span whose ancestors have not arrived yet (its agent span ends
after it) is put in the run of its first unknown ancestor, which is the agent span when
the tool span is its child (every GenAI instrumentation) and always the same span for the
spans of one invocation. When that ancestor arrives the guess is settled: an agent span
confirms it; a span that is not an agent gives its run away to where it belongs (the
engine renames the run) when that run has no state of its own yet; an agent whose
parent is unknown is taken for a sub-agent of that parent when the parent has calls of its
own. A guess that turns out wrong (a plan-node span whose name the calls lacked, a tool
span that nests them, a run to merge) is a **conflict**.

**Merge window.** A trace's spans are held (as the adapter gives them: the service holds
their bytes) for ``merge_window`` seconds after its latest span, within the memory budget.
A request that brings a conflict, or a span older than what was already replayed (a late
span: another service's export, a sibling of a parallel step in the next request), makes
the trace be analysed again whole, as ``scan`` analyses it; the detections not reported
yet are reported, each detection once. Past the window, or once the trace's held spans
were dropped for the budget, late spans are replayed as they come (and counted late).

**Completion and budget.** A trace closes ``close_delay`` seconds after its root span
arrived without newer spans, or ``trace_ttl`` seconds idle, or when evicted: past
``max_traces``, or past the memory budget (:class:`~.budget.StateBudget`), the least
recently used first (held spans are dropped before traces are evicted). Closing ends its
runs through the run model (summaries, wasted turns). A closed trace's id is remembered
so a span of it arriving later is counted late.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..conventions.spans import CompactionMarks, Lineage, SpanKind, SpanRecord, agent_name
from ..engine import RunSummary
from ..model import Detection, Scope
from .budget import StateBudget
from .model import RunModel
from .replay import Observation, Replay, TraceReport, in_replay_order

__all__ = ["Arrival", "Outcome", "TraceTable"]

# Estimated bytes held per trace (calibrated with tracemalloc on CPython 3.11,
# tests/service/test_faults.py): the per-trace objects here and in the engine, each engine
# run (its windows grow with its first calls, then stay bounded), each span in the lineage
# (plus its name, stored truncated) and in the retry table, each span held for the merge
# window (its bytes plus the holding), a remembered id of a closed trace.
TRACE_BYTES = 3072
RUN_BYTES = 3072
CALL_BYTES = 64
CALLS_PER_RUN = 128
LINEAGE_BYTES = 300
SEEN_BYTES = 160
HELD_BYTES = 120
CLOSED_BYTES = 150
NAME_CAP = 128  # characters of a span name kept in the lineage (plan nodes)
_MAX_PENDING = 64
_MAX_RUNS_COUNTED = 64

# What a provisional run's ancestor was taken for (see the module docstring).
_FED, _NONODE, _PARENT, _NOTPARENT = 1, 2, 4, 8


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
    late: int = 0
    tool_calls: int = 0
    merged: int = 0


class _Trace:
    __slots__ = ("calls", "complete_at", "cursor", "held", "held_bytes", "last_seen", "lineage", "marks", "names",
                 "open", "pending", "reported", "runs", "seen", "size", "summarised", "trace_id")

    def __init__(self, trace_id: str, max_spans: int, now: float, hold: bool = True) -> None:
        self.trace_id = trace_id
        self.size = 0  # estimated bytes, as last counted
        self.calls = 0
        self.names = 0
        self.runs: set[str] = set()
        self.lineage = Lineage(max_spans=max_spans)
        self.marks = CompactionMarks()  # the runs' compaction marks so far (their model spans)
        # span id -> detections placed on it (empty tuple: seen, nothing placed)
        self.seen: OrderedDict[str, tuple[Detection, ...]] = OrderedDict()
        self.last_seen = now
        self.complete_at: float | None = None
        self.pending: dict[str, list[Detection]] = {}  # run -> detections not yet on its agent span
        self.held: list[Any] | None = [] if hold else None  # None: not held (past the window, the budget)
        self.held_bytes = 0
        self.cursor: tuple[int, int, str] | None = None  # the last observation replayed
        self.open: dict[str, int] = {}  # unknown ancestor -> what it was taken for
        self.reported: set[tuple[Any, ...]] = set()
        self.summarised: set[str] = set()

    def estimate(self) -> int:
        runs = max(1, len(self.runs))
        lineage = len(self.lineage)
        return (TRACE_BYTES + RUN_BYTES * runs + CALL_BYTES * min(self.calls, CALLS_PER_RUN * runs)
                + LINEAGE_BYTES * lineage + min(self.names, NAME_CAP * lineage) + SEEN_BYTES * len(self.seen)
                + 200 * sum(len(p) for p in self.pending.values()) + self.held_bytes)

    def first_report(self, det: Detection) -> bool:
        """Whether ``det`` is reported: not if it was, on the same span, or at the same turn
        of the same run (an analysis again with late spans may place it on another span
        of the step: a streamed detection is not taken back)."""
        on_span = (det.span_id, det.reason.value, det.scope.value)
        at_turn = (det.run_id, det.reason.value, det.scope.value, det.turn)
        if on_span in self.reported or at_turn in self.reported:
            return False
        self.reported.add(on_span)
        self.reported.add(at_turn)
        return True


class TraceTable:
    """Per-trace state of the service over the run model (see the module docstring).

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
        self.max_traces = max_traces
        self.max_spans = max_spans
        self.trace_ttl = trace_ttl
        self.close_delay = close_delay
        self.merge_window = merge_window
        self.budget = budget if budget is not None else StateBudget(1 << 62)
        self.decode = decode or (lambda keep: keep)
        self.on_close = on_close or (lambda why, reason: None)
        self.on_summary = on_summary
        self.traces: OrderedDict[str, _Trace] = OrderedDict()
        self.closed: OrderedDict[str, None] = OrderedDict()
        self._max_closed = max_traces * 10
        self._completing: deque[tuple[float, str]] = deque()
        self._holding: OrderedDict[str, None] = OrderedDict()  # traces holding spans, least recent first
        self._held = 0
        self._current: _Trace | None = None  # the trace being replayed (for _summary)
        self._orphans: list[Detection] = []  # detections of traces evicted on the way
        # grouped runs (their engine trace key) -> when last seen: ended when idle for the
        # engine's run_ttl_seconds, summarised like any run
        self.groups: OrderedDict[str, float] = OrderedDict()

    # -- the budget ---------------------------------------------------------------------------

    @property
    def held_bytes(self) -> int:
        """Estimated bytes of the traces in state and the ids of closed traces."""
        return self._held + CLOSED_BYTES * len(self.closed)

    def _sync_budget(self) -> None:
        self.budget.set("traces", self.held_bytes)

    def recount(self, touched: Iterable[_Trace]) -> None:
        """Update the estimates of the traces a request touched, then make room while the
        state is over budget: held spans first (least recently used traces first), then
        traces (the one touched last is kept), then ids of closed traces."""
        for st in touched:
            if st.size:  # still in state
                new = st.estimate()
                self._held += new - st.size
                st.size = new
        self._sync_budget()
        budget = self.budget
        while budget.over() and self._holding:
            self._drop_held(self.traces.get(next(iter(self._holding))), next(iter(self._holding)))
        while budget.over() and len(self.traces) > 1:
            old_id, old = self.traces.popitem(last=False)
            self._orphans += self._close(old_id, old, "completed" if old.complete_at is not None else "evicted_early",
                                         "memory_budget")
        while budget.over() and self.closed:
            self.closed.popitem(last=False)
            self._sync_budget()

    def _drop_held(self, st: _Trace | None, trace_id: str) -> None:
        self._holding.pop(trace_id, None)
        if st is not None and st.held is not None:
            self._held -= st.held_bytes
            st.size -= st.held_bytes
            st.held, st.held_bytes = None, 0
        self._sync_budget()

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
        states: dict[str, _Trace] = {}
        for trace_id, group in by_trace.items():
            states[trace_id], reopened = self._trace(trace_id, now)
            if reopened:
                out.late += len(group)
        registered: dict[str, list[str]] = {}
        for trace_id, span_id, parent, name in lineage_only:
            st = states.get(trace_id)
            if st is None or span_id in st.seen or span_id in st.lineage:
                continue
            name = name[:NAME_CAP]
            st.names += len(name)
            st.lineage.add(span_id, parent, SpanKind.OTHER, name)
            registered.setdefault(trace_id, []).append(span_id)
            if not parent:
                self._mark_complete(st, now)
        for trace_id, group in by_trace.items():
            self._replay_trace(states[trace_id], group, registered.get(trace_id, []), out, now)
            if let_others_in is not None:
                let_others_in()
        self.recount(states.values())
        return out

    def _replay_trace(self, st: _Trace, group: list[Arrival], registered: list[str], out: Outcome,
                      now: float) -> None:
        fresh = self._fresh(st, group, out, registered, now)
        obs = in_replay_order([(arrival.record, arrival.kind) for arrival in fresh])
        conflict = any([self._settle(st, span_id) for span_id in registered if span_id in st.open])
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

    def _fresh(self, st: _Trace, group: list[Arrival], out: Outcome, registered: list[str],
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
            name = rec.name[:NAME_CAP]
            st.names += len(name)
            st.lineage.add(rec.span_id, rec.parent_id, arrival.kind, name,
                           agent_name(rec) if arrival.kind is SpanKind.AGENT else None)
            registered.append(rec.span_id)
            if not rec.parent_id:
                self._mark_complete(st, now)
            if st.held is not None:
                st.held.append(arrival.keep if arrival.keep is not None else rec)
                st.held_bytes += arrival.size + HELD_BYTES
        if st.held is not None and fresh:
            self._holding[st.trace_id] = None
            self._holding.move_to_end(st.trace_id)
            if len(st.held) > self.max_spans:
                self._drop_held(st, st.trace_id)
        for arrival in fresh:
            st.seen[arrival.record.span_id] = ()
        while len(st.seen) > self.max_spans:
            st.seen.popitem(last=False)
        return fresh

    def _replay_context(self, st: _Trace, report: TraceReport, provisional: bool = True) -> Replay:
        if not provisional:
            return Replay(self.model, st.trace_id, st.lineage, report, marks=st.marks)
        return Replay(self.model, st.trace_id, st.lineage, report, resolve=lambda p: self._resolve(st, p),
                      parent_run=lambda a: self._parent_run(st, a), marks=st.marks)

    def _append(self, st: _Trace, obs: list[Observation], out: Outcome) -> list[Detection]:
        """Replay a request's observations after the trace's earlier ones."""
        report = TraceReport(st.trace_id)
        replay = self._replay_context(st, report)
        replay.run(obs)
        self._end_request(st, replay)
        out.tool_calls += report.tool_calls
        st.calls += report.tool_calls
        for key in report.groups:
            self.groups[key] = st.last_seen
            self.groups.move_to_end(key)
        return report.detections + [d for dets in report.groups.values() for d in dets]

    def _end_request(self, st: _Trace, replay: Replay) -> None:
        """The request is done: the runs it touched are flushed (their steps complete)."""
        for run in replay.touched:
            replay.found(self.model.flush(st.trace_id, run))
            if len(st.runs) < _MAX_RUNS_COUNTED:
                st.runs.add(run)

    def _again(self, st: _Trace, provisional: bool = True) -> list[Detection]:
        """Analyse the trace again, whole, from its held spans (a late span, a conflict);
        its detections (the caller reports those not reported yet)."""
        self.engine.end_trace(st.trace_id)  # (discarded: the replay below starts afresh)
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

    def _report(self, st: _Trace, dets: list[Detection], fresh: list[Arrival], out: Outcome) -> None:
        """Each detection once; agent-scope ones also wait for their run's agent span."""
        for det in self.model.reported(dets):
            if not st.first_report(det):
                continue
            out.detections.append(det)
            if det.scope is Scope.AGENT:
                pending = st.pending.setdefault(det.run_id, [])
                if len(pending) < _MAX_PENDING:
                    pending.append(det)
        out.fresh.extend(fresh)
        for arrival in fresh:
            if arrival.kind is SpanKind.AGENT:
                mine = st.pending.pop(arrival.record.span_id, [])
                if mine:
                    out.on_agents.append((arrival, mine))

    # -- provisional runs ---------------------------------------------------------------------

    def _resolve(self, st: _Trace, parent_id: str) -> tuple[str, str | None, str | None, bool]:
        run, agent, node, nested, unknown = st.lineage.walk(parent_id)
        if not unknown:
            return run, agent, node, nested
        if not nested:
            st.open[unknown] = st.open.get(unknown, 0) | _FED | (_NONODE if node is None else 0)
        return unknown, agent, node, nested

    def _parent_run(self, st: _Trace, agent_id: str) -> str | None:
        entry = st.lineage.entry(agent_id)
        if entry is None:
            return ""
        run, _agent, _node, _nested, unknown = st.lineage.walk(entry[0])
        if not unknown:
            return run
        # A sub-agent of that ancestor if it has calls of its own (then it is an agent), else top-level.
        if self.engine.run_state(st.trace_id, unknown) is not None:
            st.open[unknown] = st.open.get(unknown, 0) | _PARENT
            return unknown
        st.open[unknown] = st.open.get(unknown, 0) | _NOTPARENT
        return ""

    def _settle(self, st: _Trace, span_id: str) -> bool:
        """An ancestor taken for a provisional run arrived: settle the guess; True if it was
        wrong in a way only a second analysis repairs (a conflict)."""
        flags = st.open.pop(span_id)
        entry = st.lineage.entry(span_id)
        if entry is None:
            return False
        if flags & _FED and self.engine.run_state(st.trace_id, span_id) is None:
            flags &= ~(_FED | _NONODE)  # nothing was observed in its run after all (a grouped call)
        kind = entry[1]
        if kind is SpanKind.AGENT:
            return bool(flags & _NOTPARENT)  # (a sub-agent taken for a top-level agent)
        if flags & _PARENT:
            return True  # taken for the parent agent of a sub-agent, and is none
        run, _agent, _node, nested, unknown = st.lineage.walk(entry[0])
        if flags & _NOTPARENT:
            if unknown:
                st.open[unknown] = st.open.get(unknown, 0) | _NOTPARENT
            elif run:
                return True  # the agent taken for top-level is a sub-agent
        if not flags & _FED:
            return False
        if kind is SpanKind.TOOL or flags & _NONODE or nested:
            return True  # the calls are nested in a tool call, or lacked their plan node
        if self.engine.run_state(st.trace_id, span_id) is not None:
            target = unknown or run
            if not self.engine.rename_run(st.trace_id, span_id, target):
                return True  # two runs to merge
            if span_id in st.pending:
                st.pending.setdefault(target, []).extend(st.pending.pop(span_id))
        if unknown:
            st.open[unknown] = st.open.get(unknown, 0) | _FED
        return False

    # -- state ---------------------------------------------------------------------------------

    def _summary(self, summary: RunSummary) -> None:
        st = self._current
        if st is not None:
            if summary.run_id in st.summarised:
                return  # (a trace analysed again: its ended runs are summarised once)
            st.summarised.add(summary.run_id)
        if self.on_summary is not None:
            self.on_summary(summary)

    def _trace(self, trace_id: str, now: float) -> tuple[_Trace, bool]:
        """The trace's state (created if new) and whether it had been closed before."""
        st = self.traces.get(trace_id)
        if st is not None:
            self.traces.move_to_end(trace_id)
            st.last_seen = now
            return st, False
        reopened = self.closed.pop(trace_id, False) is None
        while len(self.traces) >= self.max_traces:
            old_id, old = self.traces.popitem(last=False)
            self._orphans += self._close(old_id, old, "completed" if old.complete_at is not None else "evicted_early",
                                         "max_traces")
        st = self.traces[trace_id] = _Trace(trace_id, self.max_spans, now, self.merge_window > 0)
        st.size = st.estimate()
        self._held += st.size
        return st, reopened

    def _mark_complete(self, st: _Trace, now: float) -> None:
        if st.complete_at is None:
            st.complete_at = now
            self._completing.append((now, st.trace_id))

    def _close(self, trace_id: str, st: _Trace, why: str, reason: str = "") -> list[Detection]:
        """A trace leaves the state: its runs end (through the run model)."""
        self._holding.pop(trace_id, None)
        self._held -= st.size
        st.size = 0
        self._current = st
        try:
            dets, _summaries = self.model.end_trace(trace_id)
        finally:
            self._current = None
        self.closed[trace_id] = None
        while len(self.closed) > self._max_closed:
            self.closed.popitem(last=False)
        self._sync_budget()
        self.on_close(why, reason if why == "evicted_early" else "")
        return [d for d in self.model.reported(dets) if st.first_report(d)]

    def maintain(self, now: float | None = None) -> list[Detection]:
        """Expire idle traces, close completed ones, drop held spans past the merge window
        (call about once a second). Returns the detections found on the way (runs that
        ended with their trace): they have no request to go in."""
        now = time.monotonic() if now is None else now
        out, self._orphans = self._orphans, []
        limit = now - self.trace_ttl
        while self.traces:
            trace_id, st = next(iter(self.traces.items()))
            if st.last_seen > limit:
                break
            del self.traces[trace_id]
            out += self._close(trace_id, st, "completed" if st.complete_at is not None else "expired")
        out += self._close_completed(now)
        out += self._end_idle_groups(now - self.engine.config.run_ttl_seconds)
        window = now - self.merge_window
        while self._holding:
            trace_id = next(iter(self._holding))
            st = self.traces.get(trace_id)
            if st is not None and st.last_seen > window:
                break
            self._drop_held(st, trace_id)
        return out

    def _end_idle_groups(self, limit: float) -> list[Detection]:
        """End the grouped runs not seen since ``limit`` (through the run model: their
        summaries, their last detections)."""
        out: list[Detection] = []
        while self.groups:
            key, seen = next(iter(self.groups.items()))
            if seen > limit:
                break
            del self.groups[key]
            dets, _summaries = self.model.end_trace(key)
            out += self.model.reported(dets)
        return out

    def _close_completed(self, now: float) -> list[Detection]:
        out: list[Detection] = []
        done = now - self.close_delay
        while self._completing and self._completing[0][0] <= done:
            at, trace_id = self._completing.popleft()
            st = self.traces.get(trace_id)
            if st is None or st.complete_at != at:
                continue
            if st.last_seen <= done:
                out += self._final(st)
                del self.traces[trace_id]
                out += self._close(trace_id, st, "completed")
            else:  # spans still arriving after the root: wait a delay after the last one
                st.complete_at = st.last_seen
                self._completing.append((st.last_seen, trace_id))
        return out

    def _final(self, st: _Trace) -> list[Detection]:
        """A completed trace some of whose calls are still in provisional runs of ancestors
        that never arrived: analysed again as a whole trace is (those calls in the trace's
        own run), its new detections reported."""
        if st.held is None or sum(1 for flags in st.open.values() if flags & _FED) < 2:
            return []
        self._current = st
        try:
            dets = self._again(st, provisional=False)
        finally:
            self._current = None
        return [d for d in self.model.reported(dets) if st.first_report(d)]

    # -- views ------------------------------------------------------------------------------

    def known(self, limit: int = 100_000) -> dict[str, list[str]]:
        return {"active": list(self.traces)[-limit:], "closed": list(self.closed)[-limit:]}

    def spans(self) -> int:
        return sum(len(st.lineage) for st in list(self.traces.values()))

    def placed(self, trace_id: str, span_id: str, dets: tuple[Detection, ...]) -> None:
        """The adapter placed these detections on a span (re-placed on a retry)."""
        st = self.traces.get(trace_id)
        if st is not None and span_id in st.seen:
            st.seen[span_id] = dets


def _order(obs: Observation) -> tuple[int, int, str]:
    return obs[0], obs[1], obs[2]
