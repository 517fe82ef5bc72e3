"""The service's detection over OTLP batches: request bytes in, detections placed on spans out.

One :class:`BatchDetector` holds the run model's trace table
(:class:`~otel_progress.runs.traces.TraceTable`: the service's driver of the run model). For
each ``Export`` request it

1. decodes the request *slim* (spans as bytes) and fully decodes only the spans that may be
   tool, agent or model calls, plus the ids of the other spans the lineage needs
   (ancestors, roots): the decode stage, :mod:`.decode`;
2. replays them through the trace table (:meth:`BatchDetector._run`): retries set aside
   with the detections they got the first time, each trace's spans replayed in time order
   as ``scan`` replays a trace, the runs a request touched flushed at its end, late spans
   merged within the merge window, each detection reported once;
3. returns where each detection belongs (a span of this batch, or detached).

What a run is, how provisional runs are settled when their agent span arrives, and how
late spans are merged is in :mod:`otel_progress.runs.traces` and docs/runs.md.

Thread safety: concurrent calls of :meth:`BatchDetector.process` that share a trace are
detected in the order they arrived, and the state is changed a chunk of traces at a
time under one first-come first-served lock, which also guards it against
:meth:`maintain` and :meth:`known_traces` (see :meth:`BatchDetector.process`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from blake3 import blake3
from google.protobuf.message import DecodeError
from opentelemetry.proto.trace.v1 import trace_pb2

from ..conventions.spans import SpanKind, SpanRecord, run_group
from ..engine import ProgressEngine, RunSummary
from ..model import Detection
from ..runs.budget import StateBudget
from ..runs.carry import CONVERSATION_KEY
from ..runs.identity import span_session
from ..runs.model import RunModel
from ..runs.traces import Arrival as _Arrival
from ..runs.traces import TraceTable
from .decode import Item as _Item
from .decode import Loc, MalformedRequest, decode_spans, lineage_spans, read_request
from .metrics import ServiceMetrics
from .otlp import SlimRequest, span_record
from .ungrouped import UngroupedSpans

if TYPE_CHECKING:
    from .state import StateKeeper

__all__ = ["BatchDetector", "BatchResult", "MalformedRequest", "Placement"]

_log = logging.getLogger(__name__)
_FromString = trace_pb2.Span.FromString


@dataclass(frozen=True, slots=True)
class Placement:
    """A detection and where it goes: ``loc`` of its span in the batch (None: detached),
    the span's parent id (for a detached annotation span) and a resource index."""

    detection: Detection
    loc: Loc | None
    parent_id: str
    resource_index: int
    on_agent: bool = False  # the event repeated on the run's invoke_agent span


@dataclass
class BatchResult:
    """What one request produced."""

    spans: int = 0
    genai: int = 0
    placements: list[Placement] = field(default_factory=list)
    new_detections: list[Detection] = field(default_factory=list)
    replayed: bool = False

    @property
    def annotated(self) -> bool:
        return bool(self.placements)


CHUNK_CALLS = 256  # GenAI spans (whole traces) detected under the lock before letting others in


def _state_keys(items: Sequence[_Item]) -> list[str]:
    """The keys of the state a batch may continue and change (the state store's,
    :func:`.carried.store_key`): its traces, the grouped runs its root tool calls name
    (:func:`run_group`), and the conversations its agent spans name (a turn ends there)."""
    keys = [it.record.trace_id for it in items]
    for it in items:
        if it.kind is SpanKind.TOOL:
            group = run_group(it.record)
            if group is not None:
                keys.append(group)
        elif it.kind is SpanKind.AGENT:
            conversation = span_session(it.record.attributes)
            if conversation:
                keys.append(CONVERSATION_KEY + conversation)
    return keys


def _chunks(items: Sequence[_Item]) -> list[list[_Item]]:
    """The batch's GenAI spans grouped by trace, in chunks of whole traces of about
    :data:`CHUNK_CALLS` spans (a larger trace is a chunk of its own)."""
    by_trace: dict[str, list[_Item]] = {}
    for it in items:
        by_trace.setdefault(it.record.trace_id, []).append(it)
    if len(by_trace) == 1:
        return [list(items)]
    chunks: list[list[_Item]] = []
    current: list[_Item] = []
    for group in by_trace.values():
        if current and len(current) + len(group) > CHUNK_CALLS:
            chunks.append(current)
            current = []
        current.extend(group)
    if current:
        chunks.append(current)
    return chunks


class _FairLock:
    """A lock handed to its waiters in the order they asked for it."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._locked = False
        self._waiters: deque[threading.Lock] = deque()

    def acquire(self) -> None:
        with self._mutex:
            if not self._locked:
                self._locked = True
                return
            turn = threading.Lock()
            turn.acquire()
            self._waiters.append(turn)
        turn.acquire()  # released by release(): the lock is handed over, still locked

    def release(self) -> None:
        with self._mutex:
            if self._waiters:
                self._waiters.popleft().release()
            else:
                self._locked = False

    def waiting(self) -> bool:
        """Whether someone is waiting for the lock."""
        return bool(self._waiters)

    def __enter__(self) -> _FairLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class BatchDetector:
    """Per-trace state over one :class:`ProgressEngine` (see the module docstring)."""

    def __init__(
        self,
        engine: ProgressEngine,
        metrics: ServiceMetrics | None = None,
        *,
        max_traces: int = 10_000,
        max_spans_per_trace: int = 10_000,
        trace_ttl: float = 300.0,
        close_delay: float = 30.0,
        merge_window: float = 10.0,
        batch_cache: int = 4096,
        max_state_bytes: int = 384 * 1024 * 1024,
        model: RunModel | None = None,
        budget: StateBudget | None = None,
    ) -> None:
        self.engine = engine
        self.model = model if model is not None else RunModel(engine)
        self.max_state_bytes = max_state_bytes
        self.budget = budget if budget is not None else StateBudget(max_state_bytes)
        self.metrics = metrics if metrics is not None else ServiceMetrics()
        self.traces = TraceTable(
            self.model, max_traces=max_traces, max_spans=max_spans_per_trace, trace_ttl=trace_ttl,
            close_delay=close_delay, merge_window=merge_window, budget=self.budget, decode=_decode_held,
            on_close=self._closed, on_summary=self._summarised)
        self.ungrouped = UngroupedSpans(self.metrics)
        self._batches: OrderedDict[bytes, tuple[Placement, ...]] = OrderedDict()
        self._max_batches = batch_cache
        self._lock = _FairLock()
        self._order = threading.Condition()  # guards the two fields below
        self._next_ticket = 0
        self._pending: dict[int, frozenset[bytes] | None] = {}  # ticket -> its trace ids (None: not read yet)
        self.order_wait = 1.0
        #: checkpoints and the hand-off store (:mod:`.state`), when configured
        self.keeper: StateKeeper | None = None
        self._engine_evicted = engine.stats.traces_evicted
        self._engine_late = engine.stats.late_calls
        self.metrics.gauge_callback("progress.service.state.traces", lambda: len(self.traces.traces))
        self.metrics.gauge_callback("progress.service.state.runs", lambda: engine.active_runs)
        self.metrics.gauge_callback("progress.service.state.spans", self.traces.spans)
        self.metrics.gauge_callback("progress.service.state.bytes", lambda: self.budget.held)

    # -- public -----------------------------------------------------------------------

    def process(self, raw: bytes) -> BatchResult:
        """Detect on one request's bytes. Raises :class:`MalformedRequest` only for bytes
        that are not an ``ExportTraceServiceRequest``; never for a bad span.

        Requests that share a trace are detected in the order they arrived (a ticket each;
        a request waits at most ``order_wait`` seconds for the earlier ones that share one
        of its traces, or have not been read far enough to tell), so that a small batch
        cannot overtake a large earlier one of the same trace and make its tool calls
        late. Requests of other traces do not wait for each other: the state is updated a
        few traces at a time (:data:`CHUNK_CALLS` GenAI spans) under a first-come
        first-served lock, so a large batch lets a small one in between two chunks."""
        ticket = self._arrive()
        try:
            return self._process(raw, ticket)
        finally:
            self._depart(ticket)

    def _arrive(self) -> int:
        with self._order:
            ticket = self._next_ticket
            self._next_ticket += 1
            self._pending[ticket] = None
            return ticket

    def _depart(self, ticket: int) -> None:
        with self._order:
            self._pending.pop(ticket, None)
            self._order.notify_all()

    def _publish(self, ticket: int, traces: frozenset[bytes]) -> None:
        """Say which traces this request holds spans of (later requests wait for it only
        if they share one)."""
        with self._order:
            self._pending[ticket] = traces
            self._order.notify_all()

    def _wait_turn(self, ticket: int) -> None:
        """Wait (up to ``order_wait``) until no earlier request shares one of this
        request's traces or is still being read."""
        deadline = time.monotonic() + self.order_wait
        with self._order:
            traces = self._pending.get(ticket) or frozenset()
            while True:
                if not any(t < ticket and (ts is None or not ts.isdisjoint(traces))
                           for t, ts in self._pending.items()):
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._order.wait(remaining)

    def _process(self, raw: bytes, ticket: int) -> BatchResult:
        digest = blake3(raw).digest(length=16) if self._max_batches else b""
        if digest:
            with self._lock:
                cached = self._batches.get(digest)
                if cached is not None:
                    self._batches.move_to_end(digest)
            if cached is not None:
                spans = self._count_spans(raw)
                self.metrics.add("progress.service.batches.replayed")
                self.metrics.add("progress.service.spans.received", spans)
                return BatchResult(spans=spans, placements=list(cached), replayed=True)
        # The decode stage (.decode): the request's bytes to the spans analysed.
        request = read_request(raw)
        # Published before the spans are read, so that requests of other traces need not
        # wait for this one's reading either (all spans' traces: a superset of the GenAI ones).
        self._publish(ticket, request.trace_ids())
        items, others, unreadable = decode_spans(request)
        total = request.total
        self._wait_turn(ticket)
        result = BatchResult(spans=total, genai=len(items))
        self.metrics.add("progress.service.spans.received", total)
        self.metrics.add("progress.service.spans.unreadable", unreadable)
        self.metrics.add("progress.service.spans.genai", len(items))
        if not items:
            return result
        lineage_only = lineage_spans(items, others)

        return self._run(items, lineage_only, result, digest)

    def _run(self, items: list[_Item], lineage_only: list[tuple[str, str, str, str]], result: BatchResult,
             digest: bytes) -> BatchResult:
        """The run stage: the request's spans through the trace table, a chunk of whole
        traces at a time under the lock; where the detections go."""
        placements: list[Placement] = []
        chunks = _chunks(items)
        keeper = self.keeper
        touched = _state_keys(items) if keeper is not None and keeper.store is not None else None
        incoming = keeper.fetch(touched) if touched else ()
        outgoing: list[tuple[str, int, bytes]] = []
        with self._lock:
            if incoming:
                keeper.adopt(self.traces, incoming)  # type: ignore[union-attr]
            for n, chunk in enumerate(chunks):
                if n and self._lock.waiting():
                    self._lock.release()  # let a request of other traces in, then queue again
                    self._lock.acquire()
                traces = {it.record.trace_id for it in chunk}
                lineage = lineage_only if len(chunks) == 1 else [x for x in lineage_only if x[0] in traces]
                placements.extend(self._process_locked(chunk, lineage, result))
            if digest:
                self._batches[digest] = tuple(placements)
                while len(self._batches) > self._max_batches:
                    self._batches.popitem(last=False)
            if touched:
                outgoing = keeper.collect(self.traces, touched)  # type: ignore[union-attr]
        if outgoing:
            keeper.publish(outgoing)  # type: ignore[union-attr]
        result.placements = placements
        return result

    def maintain(self, now: float | None = None) -> list[Detection]:
        """Expire idle traces, close completed ones (call about once a second). Returns the
        detections their ends brought: they have no request to go in (counted as detached)."""
        with self._lock:
            found = self.traces.maintain(now)
            self.engine.evict_idle()
            self._sync_engine_stats()
        for det in found:
            self._count(det)
        if found:
            self.metrics.add("progress.service.detections.detached", len(found))
        return found

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the state still (no request, no maintenance) for the ``with`` block."""
        with self._lock:
            yield

    def known_traces(self, limit: int = 100_000) -> dict[str, list[str]]:
        """Trace ids held in state and recently closed (for ``/traces`` and debugging)."""
        with self._lock:
            return self.traces.known(limit)

    @property
    def trace_count(self) -> int:
        return len(self.traces.traces)

    @property
    def held_bytes(self) -> int:
        """Estimated bytes of the trace state held (see :mod:`otel_progress.runs.opentraces`).
        ``max_state_bytes`` bounds it together with the log runs' (:attr:`budget`)."""
        return self.traces.held_bytes

    # -- internals --------------------------------------------------------------------

    @staticmethod
    def count_spans(raw: bytes) -> int:
        """Spans in a request's bytes (0 when they cannot be read)."""
        return BatchDetector._count_spans(raw)

    @staticmethod
    def _count_spans(raw: bytes) -> int:
        try:
            slim = SlimRequest.FromString(raw)
        except (DecodeError, RuntimeError, ValueError):
            return 0
        return sum(len(ss.spans) for rs in slim.resource_spans for ss in rs.scope_spans)

    def _closed(self, why: str, reason: str) -> None:
        self.metrics.add(f"progress.service.traces.{why}", 1, {"reason": reason} if reason else None)

    def _summarised(self, summary: RunSummary) -> None:
        """A run ended: its wasted turns and tokens, when it ended after a detection."""
        if summary.first_detection_turn is not None:
            labels = {"gen_ai.agent.name": summary.agent or ""}
            self.metrics.add("progress.service.wasted.turns", summary.wasted_turns, labels)
            self.metrics.add("progress.service.wasted.tokens", summary.wasted_tokens, labels)
            self.metrics.add("progress.service.wasted.input_tokens", summary.wasted_input_tokens, labels)

    def _sync_engine_stats(self) -> None:
        stats = self.engine.stats
        evicted = stats.traces_evicted - self._engine_evicted
        if evicted:
            self._engine_evicted = stats.traces_evicted
            self.metrics.add("progress.service.traces.evicted_early", evicted, {"reason": "max_runs"})
        late = stats.late_calls - self._engine_late
        if late:
            self._engine_late = stats.late_calls
            self.metrics.add("progress.service.spans.late", late)

    def _process_locked(
        self,
        items: Sequence[_Item],
        lineage_only: Sequence[tuple[str, str, str, str]],
        result: BatchResult,
    ) -> list[Placement]:
        outcome = self.traces.replay([_Arrival(it.record, it.kind, it, (it.raw, it.resource), len(it.raw))
                                      for it in items], lineage_only, let_others_in=self._let_others_in)
        self.ungrouped.seen(outcome.fresh)
        placements: list[Placement] = []
        for arrival, previous in outcome.repeated:
            it = arrival.ref
            for det in previous:
                placements.append(Placement(det, it.loc, it.record.parent_id, it.loc[0]))
        in_batch = {(a.record.trace_id, a.record.span_id): a.ref for a in outcome.fresh}
        placed: dict[tuple[str, str], list[Detection]] = {}
        for det in outcome.detections:
            target = in_batch.get((det.trace_id, det.span_id))
            if target is not None:
                placements.append(Placement(det, target.loc, target.record.parent_id, target.loc[0]))
                placed.setdefault((det.trace_id, det.span_id), []).append(det)
            else:
                # Not in this batch: an annotation span, as a child of the offending span.
                any_loc = next((it.loc for it in items if it.record.trace_id == det.trace_id), (0, 0, 0))
                placements.append(Placement(det, None, det.span_id, any_loc[0]))
                self.metrics.add("progress.service.detections.detached")
            self._count(det)
        for arrival, dets in outcome.on_agents:
            it = arrival.ref
            placements.extend(Placement(det, it.loc, it.record.parent_id, it.loc[0], on_agent=True) for det in dets)
            placed.setdefault((it.record.trace_id, it.record.span_id), []).extend(dets)
        for det in outcome.after_agent:
            # The run's agent span came in an earlier request: an annotation span, its child.
            any_loc = next((it.loc for it in items if it.record.trace_id == det.trace_id), (0, 0, 0))
            placements.append(Placement(det, None, det.run_id, any_loc[0], on_agent=True))
        for (trace_id, span_id), dets in placed.items():
            self.traces.placed(trace_id, span_id, tuple(dets))
        result.new_detections.extend(outcome.detections)
        self.metrics.add("progress.service.tool_calls", outcome.tool_calls)
        self.metrics.add("progress.service.spans.duplicate", len(outcome.repeated))
        self.metrics.add("progress.service.spans.late", outcome.late)
        self.metrics.add("progress.service.traces.merged", outcome.merged)
        self._sync_engine_stats()
        return placements

    def _count(self, det: Detection) -> None:
        self.metrics.add("progress.service.detections", 1, {
            "progress.reason": det.reason.value, "progress.level": int(det.level),
            "progress.scope": det.scope.value, "progress.event": det.event,
        })

    def _let_others_in(self) -> None:
        """In a large request: let the requests waiting for the lock in (they are of other
        traces: those of this trace wait for this request's turn), then queue again."""
        if self._lock.waiting():
            self._lock.release()
            self._lock.acquire()


def _decode_held(keep: tuple[bytes, Mapping[str, Any] | None]) -> SpanRecord:
    """The record of a span held for the merge window (its bytes, its resource)."""
    return span_record(_FromString(keep[0]), keep[1])
