"""The traces ``otel-progress serve`` holds open (:mod:`.traces`), and their budget.

Per trace, :class:`TraceState`: what the replay needs (the lineage, the spans held for the
merge window, the runs named so far, the guesses of provisional runs) and what was
reported. :class:`OpenTraces` is the table of them, least recently used first:

* a trace closes ``close_delay`` seconds after its root span arrived without newer
  spans (:meth:`OpenTraces.due`), or ``trace_ttl`` seconds idle
  (:meth:`OpenTraces.expire`), or when evicted: past ``max_traces``, or past the memory
  budget (:class:`~.budget.StateBudget`), the least recently used first (held spans are
  dropped before traces are evicted). Closing ends its runs (the driver's ``end_runs``);
* held spans are dropped ``merge_window`` seconds after the trace's latest span
  (:meth:`OpenTraces.drop_held`), or past ``max_spans`` held;
* a closed trace's id is remembered so a span of it arriving later is counted late.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..conventions.spans import CompactionMarks, Lineage, SpanKind
from ..model import Detection, Level
from .budget import StateBudget

if TYPE_CHECKING:
    from .traces import Arrival

__all__ = ["NAME_CAP", "OpenTraces", "TraceState"]

# Estimated bytes held per trace (calibrated with tracemalloc on CPython 3.11,
# tests/service/test_faults.py): the per-trace objects here and in the engine, each engine
# run (its windows grow with its first calls, then stay bounded), each span in the lineage
# (plus its name, stored truncated) and in the retry table, each span held for the merge
# window (its bytes plus the holding), a remembered id of a closed trace.
TRACE_BYTES = 3584  # (+512 with the model-side state of issue 29: a run's model outputs)
RUN_BYTES = 3328  # (+256 with the same-answer and retry state of issue 25)
CALL_BYTES = 64
CALLS_PER_RUN = 128
LINEAGE_BYTES = 300
SEEN_BYTES = 160
HELD_BYTES = 120
CLOSED_BYTES = 150
NAME_CAP = 128  # characters of a span name kept in the lineage (plan nodes)
_TOP_LEVEL = int(max(Level))


class TraceState:
    """One open trace (see the module docstring)."""

    __slots__ = ("calls", "complete_at", "continued", "cursor", "held", "held_bytes", "last_seen", "lineage", "marks",
                 "names", "open", "pending", "reported", "runs", "seen", "size", "summarised", "trace_id")

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
        self.open: dict[str, int] = {}  # unknown ancestor -> what it was taken for (.provisional)
        self.reported: set[tuple[Any, ...]] = set()
        self.summarised: set[str] = set()
        self.continued = False  # continued from another process's state (.carry)

    def __setstate__(self, state: Any) -> None:
        """(Read back from a state written before ``continued`` existed, or by this class.)"""
        self.continued = False
        for part in state if isinstance(state, tuple) else (state,):
            for name, value in (part or {}).items():
                setattr(self, name, value)

    def estimate(self) -> int:
        """Estimated bytes held for this trace (here and in the engine)."""
        runs = max(1, len(self.runs))
        lineage = len(self.lineage)
        return (TRACE_BYTES + RUN_BYTES * runs + CALL_BYTES * min(self.calls, CALLS_PER_RUN * runs)
                + LINEAGE_BYTES * lineage + min(self.names, NAME_CAP * lineage) + SEEN_BYTES * len(self.seen)
                + 200 * sum(len(p) for p in self.pending.values()) + self.held_bytes)

    def register(self, span_id: str, parent_id: str, kind: SpanKind, name: str, agent: str | None = None) -> None:
        """A span in the lineage (its name cut at :data:`NAME_CAP`)."""
        name = name[:NAME_CAP]
        self.names += len(name)
        self.lineage.add(span_id, parent_id, kind, name, agent)

    def first_report(self, det: Detection) -> bool:
        """Whether ``det`` is reported: not if it was, or a higher level of its reason was,
        on the same span (a span may carry the next level: an analysis again with late spans
        may find the run's next level on the span that had the previous one), or if the same run
        had a detection at the same turn (an analysis again with late spans may place it on
        another span of the step, or find the step's loop by another signal first: a
        streamed detection is not taken back, and a turn is reported once), unless it is
        the next level of the same reason at that turn: the same signal found the loop
        again after its level was announced with nothing the run did in between (the
        model-side signals judge model outputs, and a run whose model keeps requesting a
        tool that never runs has no tool step between them, so its turn stays where it was),
        as scan reports it. In a trace continued from another process's state
        (:mod:`.carry`) a detection is identified by ``(run, reason, level)`` as well: a
        level announced for the run before the hand-off is not announced again."""
        level = int(det.level)
        on_span = ("span", det.span_id, det.reason.value, det.scope.value, level)
        at_turn = (det.run_id, det.scope.value, det.turn)
        at_level = ("level", det.run_id, det.scope.value, det.turn, det.reason.value, level)
        below = ("level", det.run_id, det.scope.value, det.turn, det.reason.value, level - 1)
        announced = ("announced", det.run_id, det.reason.value, level)
        if at_level in self.reported or any(
                ("span", det.span_id, det.reason.value, det.scope.value, lv) in self.reported
                for lv in range(level, _TOP_LEVEL + 1)):
            return False  # (on its span, the same level or a higher one was announced)
        if at_turn in self.reported and below not in self.reported:
            return False
        if self.continued and announced in self.reported:
            return False  # (a level another process announced for the run: once across replicas)
        self.reported.add(on_span)
        self.reported.add(at_turn)
        self.reported.add(at_level)
        self.reported.add(announced)
        return True


class OpenTraces:
    """The table of open traces, closed trace ids and held spans, within their bounds and
    the memory budget (see the module docstring).

    ``end_runs(trace_id, state)``: a trace leaves the table; its runs end and its
    detections still to report are returned. ``on_close(why, reason)``: see
    :class:`~.traces.TraceTable`.
    """

    def __init__(self, *, max_traces: int, max_spans: int, trace_ttl: float, close_delay: float,
                 merge_window: float, budget: StateBudget,
                 end_runs: Callable[[str, TraceState], list[Detection]],
                 on_close: Callable[[str, str], None]) -> None:
        self.max_traces = max_traces
        self.max_spans = max_spans
        self.trace_ttl = trace_ttl
        self.close_delay = close_delay
        self.merge_window = merge_window
        self.budget = budget
        self._end_runs = end_runs
        self.on_close = on_close
        self.traces: OrderedDict[str, TraceState] = OrderedDict()
        self.closed: OrderedDict[str, None] = OrderedDict()
        self._max_closed = max_traces * 10
        self._completing: deque[tuple[float, str]] = deque()
        self._holding: OrderedDict[str, None] = OrderedDict()  # traces holding spans, least recent first
        self._held = 0
        self._orphans: list[Detection] = []  # detections of traces evicted on the way

    # -- the budget ---------------------------------------------------------------------------

    @property
    def held_bytes(self) -> int:
        """Estimated bytes of the traces in state and the ids of closed traces."""
        return self._held + CLOSED_BYTES * len(self.closed)

    def _sync_budget(self) -> None:
        self.budget.set("traces", self.held_bytes)

    def recount(self, touched: Iterable[TraceState]) -> None:
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
            self._orphans += self.close(old_id, old, "completed" if old.complete_at is not None else "evicted_early",
                                        "memory_budget")
        while budget.over() and self.closed:
            self.closed.popitem(last=False)
            self._sync_budget()

    def _drop_held(self, st: TraceState | None, trace_id: str) -> None:
        self._holding.pop(trace_id, None)
        if st is not None and st.held is not None:
            self._held -= st.held_bytes
            st.size -= st.held_bytes
            st.held, st.held_bytes = None, 0
        self._sync_budget()

    def hold(self, st: TraceState, fresh: Sequence[Arrival]) -> None:
        """Hold a request's new spans of the trace for the merge window (unless its spans
        are not held any more)."""
        if st.held is None or not fresh:
            return
        for arrival in fresh:
            st.held.append(arrival.keep if arrival.keep is not None else arrival.record)
            st.held_bytes += arrival.size + HELD_BYTES
        self._holding[st.trace_id] = None
        self._holding.move_to_end(st.trace_id)
        if len(st.held) > self.max_spans:
            self._drop_held(st, st.trace_id)

    # -- traces in and out ----------------------------------------------------------------------

    def get(self, trace_id: str, now: float) -> tuple[TraceState, bool]:
        """The trace's state (created if new) and whether it had been closed before."""
        st = self.traces.get(trace_id)
        if st is not None:
            self.traces.move_to_end(trace_id)
            st.last_seen = now
            return st, False
        reopened = self.closed.pop(trace_id, False) is None
        while len(self.traces) >= self.max_traces:
            old_id, old = self.traces.popitem(last=False)
            self._orphans += self.close(old_id, old, "completed" if old.complete_at is not None else "evicted_early",
                                        "max_traces")
        st = self.traces[trace_id] = TraceState(trace_id, self.max_spans, now, self.merge_window > 0)
        st.size = st.estimate()
        self._held += st.size
        return st, reopened

    def adopt(self, st: TraceState) -> None:
        """Hold ``st`` (a trace's state carried from another process, its times already in
        this process's clock) in place of what is held of its id."""
        old = self.traces.pop(st.trace_id, None)
        if old is not None:
            self._holding.pop(st.trace_id, None)
            self._held -= old.size
        self.closed.pop(st.trace_id, None)
        st.size = st.estimate()
        self._held += st.size
        self.traces[st.trace_id] = st
        if st.held is not None:
            self._holding[st.trace_id] = None  # (dropped past the merge window, for the budget)
        if st.complete_at is not None:
            self._completing.append((st.complete_at, st.trace_id))
        self._sync_budget()

    def mark_complete(self, st: TraceState, now: float) -> None:
        """The trace's root span arrived: it closes ``close_delay`` after its last span."""
        if st.complete_at is None:
            st.complete_at = now
            self._completing.append((now, st.trace_id))

    def close(self, trace_id: str, st: TraceState, why: str, reason: str = "") -> list[Detection]:
        """A trace (taken out of ``traces`` already) leaves the state: its runs end."""
        self._holding.pop(trace_id, None)
        self._held -= st.size
        st.size = 0
        dets = self._end_runs(trace_id, st)
        self.closed[trace_id] = None
        while len(self.closed) > self._max_closed:
            self.closed.popitem(last=False)
        self._sync_budget()
        self.on_close(why, reason if why == "evicted_early" else "")
        return dets

    def take_orphans(self) -> list[Detection]:
        """The detections of traces evicted since the last call (they had no request)."""
        out, self._orphans = self._orphans, []
        return out

    def expire(self, now: float) -> list[Detection]:
        """Close the traces idle for ``trace_ttl``."""
        out: list[Detection] = []
        limit = now - self.trace_ttl
        while self.traces:
            trace_id, st = next(iter(self.traces.items()))
            if st.last_seen > limit:
                break
            del self.traces[trace_id]
            out += self.close(trace_id, st, "completed" if st.complete_at is not None else "expired")
        return out

    def due(self, now: float) -> list[TraceState]:
        """The traces complete for ``close_delay`` with nothing newer (still in the table:
        the caller closes them); those still receiving spans wait a delay after the last."""
        out: list[TraceState] = []
        done = now - self.close_delay
        while self._completing and self._completing[0][0] <= done:
            at, trace_id = self._completing.popleft()
            st = self.traces.get(trace_id)
            if st is None or st.complete_at != at:
                continue
            if st.last_seen <= done:
                out.append(st)
            else:  # spans still arriving after the root: wait a delay after the last one
                st.complete_at = st.last_seen
                self._completing.append((st.last_seen, trace_id))
        return out

    def drop_held(self, now: float) -> None:
        """Drop the spans held by traces whose latest span is past the merge window."""
        window = now - self.merge_window
        while self._holding:
            trace_id = next(iter(self._holding))
            st = self.traces.get(trace_id)
            if st is not None and st.last_seen > window:
                break
            self._drop_held(st, trace_id)

    # -- views ------------------------------------------------------------------------------

    def known(self, limit: int = 100_000) -> dict[str, list[str]]:
        """Ids of the traces in state and of the closed ones remembered (the latest ``limit``)."""
        return {"active": list(self.traces)[-limit:], "closed": list(self.closed)[-limit:]}

    def spans(self) -> int:
        """Spans in the lineages of the traces in state."""
        return sum(len(st.lineage) for st in list(self.traces.values()))

    def placed(self, trace_id: str, span_id: str, dets: tuple[Detection, ...]) -> None:
        """The adapter placed these detections on a span (re-placed on a retry)."""
        st = self.traces.get(trace_id)
        if st is not None and span_id in st.seen:
            st.seen[span_id] = dets
