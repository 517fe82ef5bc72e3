"""Run state that outlives a ``serve`` process: checkpoints and the hand-off store.

What a replica knows of each open trace (the engine's state of its runs, their escalation
level, what was reported and placed: :class:`~otel_progress.runs.carry.TraceBundle`), and
of each open run that is no trace (a grouped run, a coding agent's log run:
:class:`~otel_progress.runs.carry.RunBundle`, keyed by :func:`.carried.store_key`), is written
with the engine's codec (:mod:`otel_progress.engine.snapshot`: a fingerprint of the
writer, an HMAC, a restricted pickle) to

* a **checkpoint file** in ``--state-dir`` (:class:`Checkpoints`): on SIGTERM/SIGINT
  after the drain, and every ``--checkpoint-interval`` seconds, the most recently used
  traces first up to ``--checkpoint-max-mib``, then the grouped and log runs, and the
  conversations the engine follows across traces (``ProgressEngine.conversation_state``)
  when they fit; read back on start;
* a **store** shared by the replicas, ``--state-store redis://host:port/db``
  (:class:`RedisStore`, Redis or Valkey): after each batch (a traces or logs request),
  the state of the traces and runs it touched (one transaction, with the run TTL as
  expiry); before a batch is evaluated, the replica marks its traces and runs as being
  evaluated and reads their generations (one round trip), waits (up to
  :data:`BUSY_WAIT`) for those another replica is evaluating at that moment, and
  reads the state of those whose stored generation is newer than what it holds (it
  never saw them, or another replica continued them since: one more ``MGET``) and
  continues them from there.

A checkpoint or entry that is corrupt, or written by another version, hash seed or digest
key, is a warning and an empty start (that trace, or the whole checkpoint), never a
failure; a store that cannot be reached is a warning (rate limited), counted, and the
batch is evaluated with what the replica holds.
"""

from __future__ import annotations

import os
import socket
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..engine.snapshot import StateCodec, StateError
from ..runs.carry import ConversationBundle, RunBundle, TraceBundle
from .carried import Carried, StateIO, continue_state, export_state, store_key
from .checkpoints import CHECKPOINT_NAME, Checkpointer, Checkpoints
from .describe import redact_url
from .logs import LogsDetector
from .metrics import ServiceMetrics
from .options import ServiceConfigError

if TYPE_CHECKING:
    from ..runs.traces import TraceTable

__all__ = ["CHECKPOINT_NAME", "STORE_HELD_BYTES", "Checkpoints", "RedisStore", "StateKeeper"]

_MAX_GENERATIONS = 200_000
#: The most a trace's held spans may weigh (estimated bytes) to go with its state to the
#: store after every batch (a checkpoint carries up to ``runs.carry.CARRIED_HELD_BYTES``):
#: what a replica that continues a run needs to analyse it again whole when a batch of it
#: comes late, bounded because the store is written after every batch.
STORE_HELD_BYTES = 32 * 1024
#: How long a replica's mark on a trace it evaluates lasts (cleared by its write), ms.
BUSY_MS = 2000
#: How long a replica waits for another's mark on a trace of its batch to clear, s.
BUSY_WAIT = 1.0


#: The conditional write of one trace's state (see :meth:`RedisStore.put`).
_PUT = """
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
redis.call('DEL', KEYS[3])
if cur ~= 0 and cur ~= tonumber(ARGV[2]) then return -cur end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
local g = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return g
"""


class RedisStore:
    """The hand-off store: Redis or Valkey through redis-py (the ``store`` extra).

    Keys: ``<prefix>g:<trace id>`` (the generation of the trace's state, an integer) and
    ``<prefix>s:<trace id>`` (the state), both expiring ``ttl`` seconds after their write.
    Every call raises ``OSError`` or redis-py's errors on a store that cannot be reached
    (the caller counts and logs them)."""

    def __init__(self, url: str, ttl: float, prefix: str = "otel-progress:", timeout: float = 1.0) -> None:
        try:
            import redis
        except ImportError as exc:
            raise ServiceConfigError("state_store: needs the Redis client (redis-py): pip install"
                                     " 'otel-progress[store]'") from exc
        try:
            self._client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        except ValueError as exc:
            raise ServiceConfigError(f"state_store: cannot use {redact_url(url)!r}: {exc}") from exc
        self.errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self.url = redact_url(url)  # (for messages: without its password)
        self.ttl_ms = max(1000, int(ttl * 1000))
        self.prefix = prefix
        self._put = self._client.register_script(_PUT)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}".encode()

    def ping(self) -> None:
        """Reach the store once (raises when it cannot be reached)."""
        self._client.ping()

    def claim(self, trace_ids: Sequence[str]) -> tuple[list[int], list[bool]]:
        """Mark the traces as being evaluated by this replica (``<prefix>b:<trace id>``,
        expiring after :data:`BUSY_MS` unless :meth:`put` clears it first) and read their
        generations, in one round trip. Returns the generations (0: none) and, per trace,
        whether another replica is evaluating it now (then it is not marked)."""
        if not trace_ids:
            return [], []
        pipe = self._client.pipeline(transaction=False)
        pipe.mget([f"{self.prefix}g:{t}" for t in trace_ids])
        for t in trace_ids:
            pipe.set(f"{self.prefix}b:{t}", self.owner, nx=True, px=BUSY_MS)
            pipe.get(f"{self.prefix}b:{t}")
        results = pipe.execute()
        gens = []
        for v in results[0]:
            try:
                gens.append(int(v) if v is not None else 0)
            except ValueError:
                gens.append(0)
        busy = [not results[1 + 2 * i] and results[2 + 2 * i] not in (None, self.owner) for i in range(len(trace_ids))]
        return gens, busy

    def states(self, trace_ids: Sequence[str]) -> list[bytes | None]:
        """The stored state of each trace (None: none)."""
        return list(self._client.mget([f"{self.prefix}s:{t}" for t in trace_ids])) if trace_ids else []

    def put(self, entries: Sequence[tuple[str, int, bytes]]) -> list[int]:
        """Write ``(trace id, generation read, state)`` entries in one round trip, each
        only if the stored generation is still the one this state was based on (or there
        is none): then the state, its generation ``INCR``ed and the mark cleared change
        together (a script). Returns per entry the new generation, or 0 when another
        replica wrote the trace since (this state is stale: not written)."""
        pipe = self._client.pipeline(transaction=False)
        for trace_id, expected, data in entries:
            self._put(keys=[f"{self.prefix}s:{trace_id}", f"{self.prefix}g:{trace_id}", f"{self.prefix}b:{trace_id}"],
                      args=[data, expected, self.ttl_ms], client=pipe)
        return [max(0, int(r)) for r in pipe.execute()]

    def close(self) -> None:
        self._client.close()


class StateKeeper:
    """Checkpoints and hand-off for one service's traces and runs (see the module docstring).

    The trace and logs detectors call :meth:`fetch` (outside their lock) and :meth:`adopt`
    (inside) before a request, :meth:`collect` (inside) and :meth:`publish` (outside) after
    it; the maintenance thread calls :meth:`tick`; the service :meth:`restore` at start and
    :meth:`checkpoint` after its drain (:class:`~.checkpoints.Checkpointer`)."""

    def __init__(self, codec: StateCodec, metrics: ServiceMetrics, *, checkpoints: Checkpoints | None = None,
                 interval: float = 10.0, store: RedisStore | None = None) -> None:
        self.io = StateIO(codec, metrics)
        self.codec = codec
        self.metrics = metrics
        self.checkpoints = checkpoints
        self.store = store
        self._checkpointer = Checkpointer(self.io, checkpoints, interval) if checkpoints is not None else None
        self._generations: OrderedDict[str, int] = OrderedDict()
        self._logs: LogsDetector | None = None

    @property
    def logs(self) -> LogsDetector | None:
        """The service's logs detector, whose log runs are carried too (set by the service)."""
        return self._logs

    @logs.setter
    def logs(self, logs: LogsDetector | None) -> None:
        self._logs = logs
        if self._checkpointer is not None:
            self._checkpointer.logs = logs

    # -- checkpoints (:class:`~.checkpoints.Checkpointer`) ---------------------------------

    def tick(self, detector: Any, now: float | None = None) -> None:
        """Write a checkpoint when it is due (:meth:`.Checkpointer.tick`)."""
        if self._checkpointer is not None:
            self._checkpointer.tick(detector, now)

    def checkpoint(self, detector: Any) -> int:
        """Write a checkpoint now; how many traces and runs it holds (0: no ``--state-dir``)."""
        return self._checkpointer.checkpoint(detector) if self._checkpointer is not None else 0

    def restore(self, detector: Any) -> int:
        """Continue what the checkpoint holds (at start); how many traces and runs."""
        return self._checkpointer.restore(detector) if self._checkpointer is not None else 0

    # -- the store -------------------------------------------------------------------

    def _generation(self, trace_id: str) -> int:
        return self._generations.get(trace_id, 0)

    def _set_generation(self, trace_id: str, gen: int) -> None:
        gens = self._generations
        gens[trace_id] = gen
        gens.move_to_end(trace_id)
        if len(gens) > _MAX_GENERATIONS:
            gens.popitem(last=False)

    def fetch(self, keys: Iterable[str]) -> list[tuple[Carried, int]]:
        """The stored states newer than this replica's, of a batch's traces and runs (read
        before the batch is evaluated; :func:`.carried.store_key`), with their generations."""
        store = self.store
        if store is None:
            return []
        ids = list(dict.fromkeys(keys))
        try:
            gens, busy = store.claim(ids)
            deadline = time.monotonic() + BUSY_WAIT
            while any(busy) and time.monotonic() < deadline:
                # Another replica is evaluating some of these traces (a ring change while
                # it holds a batch of theirs): wait for its write, then read again.
                time.sleep(0.02)
                waiting = [i for i, b in enumerate(busy) if b]
                again, still = store.claim([ids[i] for i in waiting])
                for i, g, b in zip(waiting, again, still, strict=True):
                    gens[i], busy[i] = g, b
            if any(busy):
                self.metrics.add("progress.service.state.busy", sum(busy))
            newer = [(t, g) for t, g in zip(ids, gens, strict=True) if g > self._generation(t)]
            if not newer:
                return []
            states = store.states([t for t, _g in newer])
        except store.errors as exc:
            self._store_failed("read", exc)
            return []
        out: list[tuple[Carried, int]] = []
        for (key, gen), data in zip(newer, states, strict=True):
            if data is None:
                continue
            bundle = self.io.decode(data, f"store entry of {key}")
            if isinstance(bundle, (TraceBundle, RunBundle, ConversationBundle)) and store_key(bundle) == key:
                out.append((bundle, gen))
            elif bundle is not None:
                self.io.foreign("store", f"store entry of {key}: not the state of {key}")
        return out

    def adopt(self, table: TraceTable | LogsDetector, incoming: Sequence[tuple[Carried, int]]) -> None:
        """Continue the traces and runs read by :meth:`fetch` (under the detector's lock):
        traces and grouped runs in a trace table, log runs in the logs detector."""
        now = time.monotonic()
        for bundle, gen in incoming:
            key = store_key(bundle)
            if gen <= self._generation(key):
                continue  # (written by this replica meanwhile)
            try:
                continue_state(table, bundle, now)
            except Exception as exc:  # a state that does not fit: start that trace afresh
                self.io.foreign("store", f"store entry of {key} cannot be continued: {exc!r}")
                continue
            self._set_generation(key, gen)
            self.metrics.add("progress.service.state.continued", 1, {"source": "store"})

    def collect(self, table: TraceTable | LogsDetector, keys: Iterable[str]) -> list[tuple[str, int, bytes]]:
        """The state of the traces and runs a batch touched (:func:`store_key`), to
        :meth:`publish` (under the lock)."""
        if self.store is None:
            return []
        now = time.monotonic()
        out: list[tuple[str, int, bytes]] = []
        for key in dict.fromkeys(keys):
            bundle = export_state(table, key, now, STORE_HELD_BYTES)
            if bundle is None:
                continue
            try:
                data = self.io.dumps(bundle)
            except StateError as exc:
                self.metrics.add("progress.service.state.errors", 1, {"op": "write"})
                self.io.warn("encode", "otel-progress: the state of %s cannot be written: %s", key, exc)
                continue
            out.append((key, self._generation(key), data))
        return out

    def publish(self, entries: Sequence[tuple[str, int, bytes]]) -> None:
        """Write what :meth:`collect` returned (outside the lock; the requests of the same
        traces wait for this one's end, so a replica's writes of a trace are in order)."""
        if not entries or self.store is None:
            return
        try:
            gens = self.store.put(entries)
        except self.store.errors as exc:
            self._store_failed("write", exc)
            return
        stale = 0
        for (trace_id, _expected, _data), gen in zip(entries, gens, strict=True):
            if gen:
                self._set_generation(trace_id, gen)
            else:
                stale += 1  # (the next batch of the trace reads the newer state first)
        if stale:
            self.metrics.add("progress.service.state.stale", stale)
        self.metrics.add("progress.service.state.stored", len(entries) - stale)

    def _store_failed(self, op: str, exc: BaseException) -> None:
        self.metrics.add("progress.service.state.errors", 1, {"op": op})
        self.io.warn("store", "otel-progress: the state store %s cannot be reached (%s: %s); runs continue with"
                   " what this replica holds", self.store.url if self.store else "", type(exc).__name__, exc)
