"""Run state that outlives a ``serve`` process: checkpoints and the hand-off store.

What a replica knows of each open trace (the engine's state of its runs, their escalation
level, what was reported and placed: :class:`~otel_progress.runs.carry.TraceBundle`), and
of each open run that is no trace (a grouped run, a coding agent's log run:
:class:`~otel_progress.runs.carry.RunBundle`, keyed by :func:`store_key`), is written
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

import logging
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..conventions.grouping import is_group_key
from ..engine.snapshot import StateCodec, StateError
from ..runs.carry import RunBundle, TraceBundle, export_group, export_trace, import_group, import_trace
from .describe import redact_url
from .logs import LOG_RUN_KEY, LogsDetector
from .metrics import ServiceMetrics
from .options import ServiceConfigError

if TYPE_CHECKING:
    from ..runs.traces import TraceTable

__all__ = ["CHECKPOINT_NAME", "LOG_RUN_KEY", "STORE_HELD_BYTES", "Checkpoints", "RedisStore", "StateKeeper",
           "store_key"]

_log = logging.getLogger("otel_progress.service")

CHECKPOINT_NAME = "otel-progress-state.bin"
_MAX_GENERATIONS = 200_000
_CHECKPOINT_CHUNK = 32  # traces written per hold of the detector's lock
#: The most a trace's held spans may weigh (estimated bytes) to go with its state to the
#: store after every batch (a checkpoint carries up to ``runs.carry.CARRIED_HELD_BYTES``):
#: what a replica that continues a run needs to analyse it again whole when a batch of it
#: comes late, bounded because the store is written after every batch.
STORE_HELD_BYTES = 32 * 1024
#: How long a replica's mark on a trace it evaluates lasts (cleared by its write), ms.
BUSY_MS = 2000
#: How long a replica waits for another's mark on a trace of its batch to clear, s.
BUSY_WAIT = 1.0


def store_key(bundle: TraceBundle | RunBundle) -> str:
    """The key of a carried trace or run in the store (and in this replica's generations):
    a trace's id, a grouped run's group key (``group:...``), :data:`LOG_RUN_KEY` and a log
    run's run key."""
    if isinstance(bundle, TraceBundle):
        return bundle.trace_id
    return LOG_RUN_KEY + bundle.key if bundle.kind == "log" else bundle.key


def _export(target: TraceTable | LogsDetector, key: str, now: float,
            held_limit: int) -> TraceBundle | RunBundle | None:
    """The bundle of the trace or run ``key`` (:func:`store_key`) open in ``target``."""
    if isinstance(target, LogsDetector):
        return target.export_run(key[len(LOG_RUN_KEY):], now) if key.startswith(LOG_RUN_KEY) else None
    if is_group_key(key):
        return export_group(target, key, now)
    return export_trace(target, key, now, held_limit)


def _continue(target: TraceTable | LogsDetector, bundle: TraceBundle | RunBundle, now: float) -> None:
    """Continue a carried trace or run in ``target`` (a trace table, or the logs detector
    for log runs); raises ``ValueError`` for a bundle that does not belong there."""
    logs = isinstance(target, LogsDetector)
    if isinstance(bundle, RunBundle) and bundle.kind == "log" and logs:
        target.import_run(bundle, now)
    elif isinstance(bundle, RunBundle) and bundle.kind == "group" and not logs:
        import_group(target, bundle, now)
    elif isinstance(bundle, TraceBundle) and not logs:
        import_trace(target, bundle, now)
    else:
        raise ValueError(f"a {type(bundle).__name__} of kind {getattr(bundle, 'kind', 'trace')!r} does not belong here")


class _Warn:
    """A warning logged at most once per ``every`` seconds per key (the rest counted)."""

    def __init__(self, every: float = 30.0) -> None:
        self.every = every
        self._last: dict[str, float] = {}

    def __call__(self, key: str, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last.get(key, -1e9) >= self.every:
            self._last[key] = now
            _log.warning(message, *args)


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


class Checkpoints:
    """The checkpoint file of ``--state-dir`` (written whole, then renamed into place)."""

    def __init__(self, directory: str, max_bytes: int) -> None:
        self.directory = directory
        self.path = os.path.join(directory, CHECKPOINT_NAME)
        self.max_bytes = max_bytes

    def ensure(self) -> None:
        """Create the directory; raises :class:`ServiceConfigError` when it cannot be written."""
        try:
            os.makedirs(self.directory, exist_ok=True)
            probe = os.path.join(self.directory, f".{CHECKPOINT_NAME}.probe")
            with open(probe, "wb"):
                pass
            os.unlink(probe)
        except OSError as exc:
            raise ServiceConfigError(f"state_dir: cannot write to {self.directory}: {exc.strerror or exc}") from exc

    def write(self, data: bytes) -> None:
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def read(self) -> bytes | None:
        try:
            with open(self.path, "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None


class StateKeeper:
    """Checkpoints and hand-off for one service's trace table (see the module docstring).

    The detector calls :meth:`fetch` (outside its lock) and :meth:`adopt` (inside) before a
    batch, :meth:`collect` (inside) and :meth:`publish` (outside) after it; the maintenance
    thread calls :meth:`tick`; the service :meth:`restore` at start and :meth:`checkpoint`
    after its drain."""

    def __init__(self, codec: StateCodec, metrics: ServiceMetrics, *, checkpoints: Checkpoints | None = None,
                 interval: float = 10.0, store: RedisStore | None = None) -> None:
        self.codec = codec
        self.metrics = metrics
        self.checkpoints = checkpoints
        self.interval = interval
        self.store = store
        #: the service's logs detector, whose log runs are carried too (set by the service)
        self.logs: LogsDetector | None = None
        self._generations: OrderedDict[str, int] = OrderedDict()
        self._next_checkpoint = time.monotonic() + interval
        self._warn = _Warn()

    # -- the store -------------------------------------------------------------------

    def _generation(self, trace_id: str) -> int:
        return self._generations.get(trace_id, 0)

    def _set_generation(self, trace_id: str, gen: int) -> None:
        gens = self._generations
        gens[trace_id] = gen
        gens.move_to_end(trace_id)
        if len(gens) > _MAX_GENERATIONS:
            gens.popitem(last=False)

    def fetch(self, keys: Iterable[str]) -> list[tuple[TraceBundle | RunBundle, int]]:
        """The stored states newer than this replica's, of a batch's traces and runs (read
        before the batch is evaluated; :func:`store_key`), with their generations."""
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
        out: list[tuple[TraceBundle | RunBundle, int]] = []
        for (key, gen), data in zip(newer, states, strict=True):
            if data is None:
                continue
            bundle = self._decode(data, f"store entry of {key}")
            if isinstance(bundle, (TraceBundle, RunBundle)) and store_key(bundle) == key:
                out.append((bundle, gen))
            elif bundle is not None:
                self._foreign("store", f"store entry of {key}: not the state of {key}")
        return out

    def adopt(self, table: TraceTable | LogsDetector, incoming: Sequence[tuple[TraceBundle | RunBundle, int]]) -> None:
        """Continue the traces and runs read by :meth:`fetch` (under the detector's lock):
        traces and grouped runs in a trace table, log runs in the logs detector."""
        now = time.monotonic()
        for bundle, gen in incoming:
            key = store_key(bundle)
            if gen <= self._generation(key):
                continue  # (written by this replica meanwhile)
            try:
                _continue(table, bundle, now)
            except Exception as exc:  # a state that does not fit: start that trace afresh
                self._foreign("store", f"store entry of {key} cannot be continued: {exc!r}")
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
            bundle = _export(table, key, now, STORE_HELD_BYTES)
            if bundle is None:
                continue
            try:
                data = self.codec.dumps(bundle)
            except StateError as exc:
                self.metrics.add("progress.service.state.errors", 1, {"op": "write"})
                self._warn("encode", "otel-progress: the state of %s cannot be written: %s", key, exc)
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
        self._warn("store", "otel-progress: the state store %s cannot be reached (%s: %s); runs continue with"
                   " what this replica holds", self.store.url if self.store else "", type(exc).__name__, exc)

    # -- checkpoints -----------------------------------------------------------------

    def tick(self, detector: Any, now: float | None = None) -> None:
        """Write a checkpoint when ``interval`` seconds passed since the last one began
        (or five times as long as the last one took, if that is longer)."""
        if self.checkpoints is None:
            return
        now = time.monotonic() if now is None else now
        if now >= self._next_checkpoint:
            self.checkpoint(detector)
            took = time.monotonic() - now
            # (at most a fifth of the time spent writing checkpoints, however many traces)
            self._next_checkpoint = now + max(self.interval, 5 * took)

    def checkpoint(self, detector: Any) -> int:
        """Write every open trace (the most recently used first, within the size bound)
        to the checkpoint file; returns how many were written. The detector's lock is
        held for a few traces at a time (each trace is consistent; the checkpoint as a
        whole is not an instant: requests go on while it is written)."""
        cp = self.checkpoints
        if cp is None:
            return 0
        entries: list[bytes] = []
        size, left_out = 0, 0
        with detector.locked():
            order = list(reversed(detector.traces.open.traces))  # (the most recently used first)
        for start in range(0, len(order), _CHECKPOINT_CHUNK):
            # A chunk of traces at a time under the detector's lock: each trace is written
            # whole, and requests go on between chunks.
            with detector.locked():
                table = detector.traces
                now = time.monotonic()
                for trace_id in order[start:start + _CHECKPOINT_CHUNK]:
                    if size >= cp.max_bytes:
                        left_out += 1
                        continue
                    bundle = export_trace(table, trace_id, now)
                    if bundle is None:
                        continue  # (closed since)
                    try:
                        data = self.codec.dumps(bundle)
                    except StateError:
                        left_out += 1
                        continue
                    if size + len(data) > cp.max_bytes:
                        left_out += 1
                        continue
                    size += len(data)
                    entries.append(data)
        runs, runs_size, runs_left_out = self._checkpoint_runs(detector, cp.max_bytes - size)
        size += runs_size
        left_out += runs_left_out
        conversations = b""
        with detector.locked():
            state = detector.traces.engine.conversation_state()
            if state:
                try:
                    conversations = self.codec.dumps(state)
                except StateError:
                    conversations = b""
        if size + len(conversations) > cp.max_bytes:
            self._warn("bound-conversations", "otel-progress: checkpoint %s leaves out the conversations followed"
                       " across traces (%d bytes past --checkpoint-max-mib)", cp.path, len(conversations))
            conversations = b""
        try:
            cp.write(self.codec.dumps({"written": time.time(), "entries": entries, "runs": runs,
                                       "conversations": conversations}))
        except (OSError, StateError) as exc:
            self.metrics.add("progress.service.state.errors", 1, {"op": "checkpoint"})
            self._warn("checkpoint", "otel-progress: cannot write the checkpoint %s: %s", cp.path, exc)
            return 0
        self.metrics.add("progress.service.state.checkpoints")
        if left_out:
            self._warn("bound", "otel-progress: checkpoint %s holds %d traces and %d other runs; %d least recently"
                       " used left out (--checkpoint-max-mib)", cp.path, len(entries), len(runs), left_out)
        return len(entries) + len(runs)

    def _checkpoint_runs(self, detector: Any, room: int) -> tuple[list[bytes], int, int]:
        """The grouped runs and the log runs, encoded (the most recently seen first, within
        ``room`` bytes): ``(entries, their size, how many were left out)``."""
        entries: list[bytes] = []
        size, left_out = 0, 0

        def add(bundle: RunBundle | None) -> None:
            nonlocal size, left_out
            if bundle is None:
                return
            try:
                data = self.codec.dumps(bundle)
            except StateError:
                left_out += 1
                return
            if size + len(data) > room:
                left_out += 1
                return
            size += len(data)
            entries.append(data)

        with detector.locked():
            table, now = detector.traces, time.monotonic()
            for key in table.groups.open_keys():
                add(export_group(table, key, now))
        logs = self.logs
        if logs is not None:
            with logs.locked():
                now = time.monotonic()
                for key in logs.run_keys():
                    add(logs.export_run(key, now))
        return entries, size, left_out

    def restore(self, detector: Any) -> int:
        """Continue the traces of the checkpoint file (at start); returns how many. A
        corrupt or foreign checkpoint is a warning and an empty start."""
        cp = self.checkpoints
        if cp is None:
            return 0
        try:
            data = cp.read()
        except OSError as exc:
            self._foreign("checkpoint", f"checkpoint {cp.path} cannot be read: {exc}")
            return 0
        if data is None:
            return 0
        snapshot = self._decode(data, f"checkpoint {cp.path}")
        if snapshot is None:
            return 0
        if not isinstance(snapshot, dict) or not isinstance(snapshot.get("entries"), list):
            self._foreign("checkpoint", f"checkpoint {cp.path}: not a checkpoint; starting empty")
            return 0
        try:
            elapsed = max(0.0, time.time() - float(snapshot.get("written", time.time())))
        except (TypeError, ValueError):
            elapsed = 0.0
        bundles = [b for d in snapshot["entries"] if isinstance(b := self._decode(d, "checkpoint entry"), TraceBundle)]
        now = time.monotonic()
        restored = 0
        with detector.locked():
            for bundle in reversed(bundles):  # (least recently used first)
                bundle.idle += elapsed
                bundle.engine_idle += elapsed
                if bundle.complete_age is not None:
                    bundle.complete_age += elapsed
                try:
                    import_trace(detector.traces, bundle, now)
                except Exception as exc:
                    self._foreign("checkpoint", f"checkpoint entry of trace {bundle.trace_id} cannot be"
                                  f" continued: {exc!r}")
                    continue
                restored += 1
        runs = self._restore_runs(detector, snapshot.get("runs"), elapsed, now)
        self.metrics.add("progress.service.state.continued", restored + runs, {"source": "checkpoint"})
        conversations = self._restore_conversations(detector, snapshot.get("conversations"), elapsed, cp.path)
        _log.info("otel-progress: restored %d open traces%s%s from %s", restored,
                  f", {runs} other runs (grouped, of logs)" if runs else "",
                  f" and {conversations} conversations" if conversations else "", cp.path)
        return restored + runs

    def _restore_runs(self, detector: Any, entries: Any, elapsed: float, now: float) -> int:
        """Continue the grouped runs and log runs of a checkpoint (``entries``: encoded
        :class:`RunBundle`); returns how many."""
        if not isinstance(entries, list):
            return 0
        bundles = [b for d in entries if isinstance(b := self._decode(d, "checkpoint entry"), RunBundle)]
        restored = 0
        for bundle in reversed(bundles):  # (least recently seen first)
            bundle.idle += elapsed
            bundle.engine_idle += elapsed
            target = self.logs if bundle.kind == "log" else detector
            if target is None:
                self._foreign("checkpoint", f"checkpoint entry of log run {bundle.key}: this service reads no logs")
                continue
            try:
                with target.locked():
                    _continue(target if bundle.kind == "log" else detector.traces, bundle, now)
            except Exception as exc:
                self._foreign("checkpoint", f"checkpoint entry of {store_key(bundle)} cannot be continued: {exc!r}")
                continue
            restored += 1
        return restored

    def _restore_conversations(self, detector: Any, data: Any, elapsed: float, path: str) -> int:
        """Continue the conversations of a checkpoint (``data``: their encoded state)."""
        if not isinstance(data, bytes) or not data:
            return 0
        state = self._decode(data, f"checkpoint {path} (conversations)")
        if not isinstance(state, dict):
            return 0
        try:
            with detector.locked():
                return int(detector.traces.engine.adopt_conversations(state, elapsed))
        except Exception as exc:  # a state that does not fit: the conversations start afresh
            self._foreign("checkpoint", f"checkpoint {path}: its conversations cannot be continued: {exc!r}")
            return 0

    # -- reading ---------------------------------------------------------------------

    def _decode(self, data: Any, what: str) -> Any:
        try:
            return self.codec.loads(data)
        except StateError as exc:
            self._foreign("checkpoint" if what.startswith("checkpoint") else "store",
                          f"{what} is ignored ({type(exc).__name__}: {exc}); starting empty")
            return None

    def _foreign(self, source: str, message: str) -> None:
        self.metrics.add("progress.service.state.ignored", 1, {"source": source})
        self._warn(f"foreign:{source}", "otel-progress: %s", message)
