"""The service's detection state: OTLP batches in, detections placed on spans out.

One :class:`BatchDetector` holds the engine and a bounded table of traces. For each
``Export`` request it

1. parses the request *slim* (spans as bytes) and fully parses only the spans that may be
   tool, agent or model calls (:func:`otlp.marked_spans`);
2. skips GenAI spans already seen in their trace (Collector retries), re-applying the
   annotations they got the first time;
3. replays the batch's GenAI spans through the engine in time order, as
   :func:`otel_progress.analyse.analyse_trace` does for a whole trace: model calls at
   their start (flush the run, add tokens), tool calls at their start (``observe``),
   agent invocations at their end (``end_run``); then flushes every run it touched, so
   every detection lands in the batch that completed its step;
4. returns where each detection belongs (a span of this batch, or detached).

Runs. In a batch an ``invoke_agent`` span arrives after its tool spans (it ends after
them), so the service cannot key a run by its agent span as the in-process processor
does, and using the agent span id only when it happens to be known would split a run at
batch boundaries. A tool or model span's run is therefore its ``gen_ai.agent.id`` (else
``gen_ai.agent.name``) attribute, as ``"agent:<value>"``, else the whole trace (``""``).
Per-trace lineage (the spans seen so far, bounded) still gives the plan node, finds tool
spans nested in tool spans, and the parent run of a sub-agent when its parent is known.
For a single-agent trace this gives the same detections (reason, turn, span) as the
in-process processor.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from blake3 import blake3
from google.protobuf.message import DecodeError

from ..conventions import own_trace
from ..engine import ProgressEngine
from ..model import Detection, Scope
from ..spans import CompactionMarks, Lineage, SpanKind, agent_name, read_tokens, read_tool_call, run_group
from .decode import Item as _Item
from .decode import Loc, MalformedRequest, decode_spans, lineage_spans, read_request
from .metrics import ServiceMetrics
from .otlp import SlimRequest

__all__ = ["BatchDetector", "BatchResult", "MalformedRequest", "Placement", "run_key"]

_log = logging.getLogger(__name__)

_MAX_PENDING = 64

# The memory budget (``max_state_bytes``) counts an estimate of what each trace holds,
# calibrated with tracemalloc on CPython 3.11 (tests/service/test_faults.py checks it
# against tracemalloc): the detector's and the engine's per-trace objects, each engine run
# (its windows grow with its first calls, then stay bounded), each span remembered in the
# lineage table (plus its name, stored truncated) and in the retry table.
TRACE_BYTES = 3072
RUN_BYTES = 3072
CALL_BYTES = 64
CALLS_PER_RUN = 128  # an engine run's state stops growing after about this many calls
LINEAGE_BYTES = 300
SEEN_BYTES = 160
CLOSED_BYTES = 150  # one remembered id of a closed trace
NAME_CAP = 128  # characters of a span name kept in the lineage table (plan nodes)


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


class _Trace:
    __slots__ = ("calls", "complete_at", "held", "last_seen", "lineage", "names", "pending", "runs", "seen",
                 "trace_id")

    def __init__(self, trace_id: str, max_spans: int, now: float) -> None:
        self.trace_id = trace_id
        self.held = 0  # estimated bytes, as last counted in BatchDetector.held_bytes
        self.calls = 0  # tool calls given to the engine
        self.names = 0  # characters of the span names registered in the lineage
        self.runs: set[str] = set()  # run keys given to the engine
        self.lineage = Lineage(max_spans=max_spans)
        # span id -> detections placed on it (empty tuple: seen, nothing placed)
        self.seen: OrderedDict[str, tuple[Detection, ...]] = OrderedDict()
        self.last_seen = now
        self.complete_at: float | None = None
        # run key -> detections not yet written on the run's agent span
        self.pending: dict[str, list[Detection]] = {}

    def estimate(self) -> int:
        """Estimated bytes this trace holds, in the detector and in the engine."""
        runs = max(1, len(self.runs))
        lineage = len(self.lineage)
        return (TRACE_BYTES + RUN_BYTES * runs + CALL_BYTES * min(self.calls, CALLS_PER_RUN * runs)
                + LINEAGE_BYTES * lineage + min(self.names, NAME_CAP * lineage) + SEEN_BYTES * len(self.seen)
                + 200 * sum(len(p) for p in self.pending.values()))


def run_key(attributes: Mapping[str, Any]) -> str:
    """The run a tool or model span belongs to in the service: ``agent:<gen_ai.agent.id>``,
    else ``agent:<gen_ai.agent.name>``, else ``""`` (the trace)."""
    for key in ("gen_ai.agent.id", "gen_ai.agent.name"):
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return "agent:" + value
    return ""


CHUNK_CALLS = 256  # GenAI spans (whole traces) detected under the lock before letting others in


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
        batch_cache: int = 4096,
        max_state_bytes: int = 384 * 1024 * 1024,
    ) -> None:
        self.engine = engine
        self.max_state_bytes = max_state_bytes
        self._held = 0  # estimated bytes of the traces in state (see _Trace.estimate)
        self.metrics = metrics if metrics is not None else ServiceMetrics()
        self.max_traces = max_traces
        self.max_spans = max_spans_per_trace
        self.trace_ttl = trace_ttl
        self.close_delay = close_delay
        self._traces: OrderedDict[str, _Trace] = OrderedDict()
        self._closed: OrderedDict[str, None] = OrderedDict()
        self._max_closed = max_traces * 10
        self._completing: deque[tuple[float, str]] = deque()
        self._batches: OrderedDict[bytes, tuple[Placement, ...]] = OrderedDict()
        self._max_batches = batch_cache
        self._lock = _FairLock()
        self._order = threading.Condition()  # guards the two fields below
        self._next_ticket = 0
        self._pending: dict[int, frozenset[bytes] | None] = {}  # ticket -> its trace ids (None: not read yet)
        self.order_wait = 1.0
        self._compactions = CompactionMarks()  # the runs' compaction boundaries, from their model spans
        self._engine_evicted = engine.stats.traces_evicted
        self._engine_late = engine.stats.late_calls
        self.metrics.gauge_callback("progress.service.state.traces", lambda: len(self._traces))
        self.metrics.gauge_callback("progress.service.state.runs", lambda: engine.active_runs)
        self.metrics.gauge_callback("progress.service.state.spans", self._state_spans)
        self.metrics.gauge_callback("progress.service.state.bytes", lambda: self.held_bytes)

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

        placements: list[Placement] = []
        chunks = _chunks(items)
        with self._lock:
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
        result.placements = placements
        return result

    def maintain(self, now: float | None = None) -> None:
        """Expire idle traces and close completed ones (call about once a second)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._expire(now)

    def known_traces(self, limit: int = 100_000) -> dict[str, list[str]]:
        """Trace ids held in state and recently closed (for ``/traces`` and debugging)."""
        with self._lock:
            active = list(self._traces)[-limit:]
            closed = list(self._closed)[-limit:]
        return {"active": active, "closed": closed}

    @property
    def trace_count(self) -> int:
        return len(self._traces)

    @property
    def held_bytes(self) -> int:
        """Estimated bytes of the state held: the traces (see :data:`TRACE_BYTES` and the
        constants after it) and the ids of recently closed traces. What
        ``max_state_bytes`` bounds."""
        return self._held + CLOSED_BYTES * len(self._closed)

    # -- internals --------------------------------------------------------------------

    def _state_spans(self) -> int:
        return sum(len(t.lineage) for t in list(self._traces.values()))

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

    def _trace(self, trace_id: str, now: float) -> tuple[_Trace, bool]:
        """The trace's state (created if new) and whether it had been closed before."""
        entry = self._traces.get(trace_id)
        if entry is not None:
            self._traces.move_to_end(trace_id)
            entry.last_seen = now
            return entry, False
        reopened = self._closed.pop(trace_id, False) is None
        while len(self._traces) >= self.max_traces:
            old_id, old = self._traces.popitem(last=False)
            self._close(old_id, old, "completed" if old.complete_at is not None else "evicted_early",
                        "max_traces")
        entry = self._traces[trace_id] = _Trace(trace_id, self.max_spans, now)
        entry.held = entry.estimate()
        self._held += entry.held
        return entry, reopened

    def _close(self, trace_id: str, entry: _Trace, why: str, reason: str = "") -> None:
        self._held -= entry.held
        entry.held = 0
        self.engine.end_trace(trace_id)
        self._closed[trace_id] = None
        while len(self._closed) > self._max_closed:
            self._closed.popitem(last=False)
        labels = {"reason": reason} if why == "evicted_early" and reason else None
        self.metrics.add(f"progress.service.traces.{why}", 1, labels)

    def _recount(self, entries: Mapping[str, _Trace]) -> None:
        """Update the held-bytes estimate of the traces a batch touched, then evict the
        least recently used traces while the state is over ``max_state_bytes`` (the
        trace touched last is always kept)."""
        for entry in entries.values():
            if entry.held:  # still in state
                new = entry.estimate()
                self._held += new - entry.held
                entry.held = new
        while self.held_bytes > self.max_state_bytes and len(self._traces) > 1:
            old_id, old = self._traces.popitem(last=False)
            self._close(old_id, old, "completed" if old.complete_at is not None else "evicted_early",
                        "memory_budget")
        while self.held_bytes > self.max_state_bytes and self._closed:  # ids of closed traces come last
            self._closed.popitem(last=False)

    def _expire(self, now: float) -> None:
        limit = now - self.trace_ttl
        while self._traces:
            trace_id, entry = next(iter(self._traces.items()))
            if entry.last_seen > limit:
                break
            del self._traces[trace_id]
            self._close(trace_id, entry, "completed" if entry.complete_at is not None else "expired")
        done = now - self.close_delay
        while self._completing and self._completing[0][0] <= done:
            at, trace_id = self._completing.popleft()
            entry = self._traces.get(trace_id)
            if entry is None or entry.complete_at != at:
                continue
            if entry.last_seen <= done:
                del self._traces[trace_id]
                self._close(trace_id, entry, "completed")
            else:  # spans still arriving after the root: wait a delay after the last one
                entry.complete_at = entry.last_seen
                self._completing.append((entry.last_seen, trace_id))
        self.engine.evict_idle()
        self._sync_engine_stats()

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
        now = time.monotonic()
        engine = self.engine
        placements: list[Placement] = []
        entries: dict[str, _Trace] = {}
        late = 0
        for it in items:
            tid = it.record.trace_id
            if tid not in entries:
                entries[tid], reopened = self._trace(tid, now)
                if reopened:
                    late += sum(1 for x in items if x.record.trace_id == tid)
        for tid, sid, parent, name in lineage_only:
            entry = entries.get(tid)
            if entry is None:
                continue
            if sid not in entry.seen:
                name = name[:NAME_CAP]
                entry.names += len(name)
                entry.lineage.add(sid, parent, SpanKind.OTHER, name)
            if not parent:
                self._mark_complete(entry, now)

        # Deduplicate (retries) and register the batch's GenAI spans in the lineage first,
        # so that a parent arriving in the same batch is known.
        fresh: list[_Item] = []
        in_batch: dict[tuple[str, str], _Item] = {}
        duplicates = 0
        for n, it in enumerate(items, 1):
            if n % (8 * CHUNK_CALLS) == 0:
                self._let_others_in()
            rec = it.record
            entry = entries[rec.trace_id]
            key = (rec.trace_id, rec.span_id)
            previous = entry.seen.get(rec.span_id)
            if previous is not None or key in in_batch:
                duplicates += 1
                for det in previous or ():
                    placements.append(Placement(det, it.loc, rec.parent_id, it.loc[0]))
                continue
            in_batch[key] = it
            fresh.append(it)
            name = rec.name[:NAME_CAP]
            entry.names += len(name)
            entry.lineage.add(rec.span_id, rec.parent_id, it.kind, name,
                              agent_name(rec) if it.kind is SpanKind.AGENT else None)
            if not rec.parent_id:
                self._mark_complete(entry, now)

        # Replay in time order: model and tool calls at their start, agents at their end.
        timeline = sorted(
            fresh,
            key=lambda it: (it.record.end_ns if it.kind is SpanKind.AGENT else it.record.start_ns,
                            2 if it.kind is SpanKind.AGENT else 1, it.record.span_id),
        )
        detections: list[Detection] = []
        touched: dict[tuple[str, str], None] = {}
        on_agents: list[tuple[_Item, list[Detection]]] = []
        tool_calls = 0

        def found(entry: _Trace, dets: Sequence[Detection]) -> None:
            for det in dets:
                detections.append(det)
                if det.scope is Scope.AGENT:  # also goes on the run's agent span, when it arrives
                    pending = entry.pending.setdefault(det.run_id, [])
                    if len(pending) < _MAX_PENDING:
                        pending.append(det)

        for n, it in enumerate(timeline, 1):
            if n % CHUNK_CALLS == 0:
                self._let_others_in()
            rec = it.record
            entry = entries[rec.trace_id]
            if it.kind is SpanKind.TOOL:
                _run, agent, node, nested = entry.lineage.resolve(rec.parent_id)
                if nested:
                    continue
                key = run_key(rec.attributes)
                # A root tool call without an agent key: its client's run, across traces (and a
                # call its producer gave a trace of its own, such as Gemini CLI's, whatever
                # its agent attribute says).
                group = run_group(rec) if not key or own_trace(rec) else None
                call = read_tool_call(rec, run_id=key, agent=agent, node=node, trace_key=group)
                tool_calls += 1
                entry.calls += 1
                if group is not None:
                    found(entry, [replace(d, trace_id=rec.trace_id) for d in engine.observe(call, flush=True)])
                    continue
                if len(entry.runs) < 64:
                    entry.runs.add(key)
                found(entry, engine.observe(call))
                touched[(rec.trace_id, key)] = None
            elif it.kind is SpanKind.MODEL:
                key = run_key(rec.attributes)
                found(entry, engine.flush(rec.trace_id, key))
                compaction = self._compactions.at(rec, rec.trace_id, key)
                if compaction is not None:
                    found(entry, engine.compaction(compaction))
                engine.record_tokens(rec.trace_id, key, read_tokens(rec))
                touched[(rec.trace_id, key)] = None
                if len(entry.runs) < 64:
                    entry.runs.add(key)
            else:  # agent
                key = run_key(rec.attributes)
                if not (key and engine.run_state(rec.trace_id, key) is not None):
                    key = ""  # the trace-level run: its calls carried no agent attribute
                found(entry, engine.flush(rec.trace_id, key))
                parent_run = entry.lineage.parent_run(rec.span_id)
                if not parent_run and rec.parent_id:
                    # A sub-agent whose parent run is not known yet (it ends later): the
                    # run-scope signature is still evaluated, at the trace level.
                    parent_run = "\x00trace"
                # A keyed run ends with its agent span; the trace-level run lives on until
                # the trace closes (other agents of the trace may still add to it).
                summary = engine.end_run(rec.trace_id, key or rec.span_id, span_id=rec.span_id,
                                         parent_run_id=parent_run)
                if summary is not None:
                    found(entry, summary.detections_list)
                mine = entry.pending.pop(key, [])
                if mine:
                    on_agents.append((it, mine))
                if key:
                    touched.pop((rec.trace_id, key), None)
        for trace_id, key in touched:
            found(entries[trace_id], engine.flush(trace_id, key))

        # Place the detections.
        for it in fresh:
            entry = entries[it.record.trace_id]
            entry.seen[it.record.span_id] = ()
            while len(entry.seen) > self.max_spans:
                entry.seen.popitem(last=False)
        placed_by_span: dict[tuple[str, str], list[Detection]] = {}
        for det in detections:
            target = in_batch.get((det.trace_id, det.span_id))
            if target is not None:
                placements.append(Placement(det, target.loc, target.record.parent_id, target.loc[0]))
                placed_by_span.setdefault((det.trace_id, det.span_id), []).append(det)
            else:
                # Not in this batch: an annotation span, as a child of the offending span.
                any_loc = next((it.loc for it in items if it.record.trace_id == det.trace_id), (0, 0, 0))
                placements.append(Placement(det, None, det.span_id, any_loc[0]))
                self.metrics.add("progress.service.detections.detached")
            self.metrics.add("progress.service.detections", 1, {
                "progress.reason": det.reason.value, "progress.level": int(det.level),
                "progress.scope": det.scope.value, "progress.event": det.event,
            })
        for it, dets in on_agents:
            for det in dets:
                placements.append(Placement(det, it.loc, it.record.parent_id, it.loc[0], on_agent=True))
            placed_by_span.setdefault((it.record.trace_id, it.record.span_id), []).extend(dets)
        for (trace_id, span_id), dets in placed_by_span.items():
            entries[trace_id].seen[span_id] = tuple(dets)
        result.new_detections.extend(detections)
        self.metrics.add("progress.service.tool_calls", tool_calls)
        self.metrics.add("progress.service.spans.duplicate", duplicates)
        self.metrics.add("progress.service.spans.late", late)
        self._sync_engine_stats()
        self._recount(entries)
        if self._traces and next(iter(self._traces.values())).last_seen <= now - self.trace_ttl:
            self._expire(now)
        return placements

    def _let_others_in(self) -> None:
        """In a large trace: let the requests waiting for the lock in (they are of other
        traces: those of this trace wait for this request's turn), then queue again."""
        if self._lock.waiting():
            self._lock.release()
            self._lock.acquire()

    def _mark_complete(self, entry: _Trace, now: float) -> None:
        if entry.complete_at is None:
            entry.complete_at = now
            self._completing.append((now, entry.trace_id))
