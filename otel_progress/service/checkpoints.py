"""Checkpoints of ``serve``'s run state (``--state-dir``): :class:`Checkpoints` is the file,
:class:`Checkpointer` writes what a replica knows of its open traces and runs into it and
reads it back on start (see :mod:`.state` and docs/service.md, *Deployments and
guarantees*).

A checkpoint holds the open traces (the most recently used first, up to
``--checkpoint-max-mib``), then the grouped runs and coding agents' log runs, then the
conversations the engine follows across traces, each while it fits. A checkpoint or entry
that is corrupt, or written by another version, hash seed or digest key, is a warning and
an empty start (that entry, or the whole checkpoint), never a failure.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from ..engine.snapshot import StateError
from ..runs.carry import RunBundle, TraceBundle, export_group, export_trace, import_trace
from .carried import StateIO, continue_state, store_key
from .logs import LogsDetector
from .options import ServiceConfigError

__all__ = ["CHECKPOINT_NAME", "Checkpointer", "Checkpoints"]

_log = logging.getLogger("otel_progress.service")

CHECKPOINT_NAME = "otel-progress-state.bin"
_CHECKPOINT_CHUNK = 32  # traces written per hold of the detector's lock


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


class _Entries:
    """Encoded checkpoint entries within ``room`` bytes (what does not fit is counted)."""

    def __init__(self, io: StateIO, room: int) -> None:
        self.io = io
        self.room = room
        self.data: list[bytes] = []
        self.size = 0
        self.left_out = 0

    def add(self, bundle: TraceBundle | RunBundle | None) -> None:
        if bundle is None:
            return  # (closed since)
        if self.size >= self.room:
            self.left_out += 1
            return
        try:
            data = self.io.dumps(bundle)
        except StateError:
            self.left_out += 1
            return
        if self.size + len(data) > self.room:
            self.left_out += 1
            return
        self.size += len(data)
        self.data.append(data)


class Checkpointer:
    """Writes the checkpoint of one service's open traces and runs, and reads it back.

    ``detector``: the service's :class:`~.detector.BatchDetector` (its trace table and
    lock); :attr:`logs`: the logs detector, whose log runs are written too (set by the
    service)."""

    def __init__(self, io: StateIO, file: Checkpoints, interval: float = 10.0) -> None:
        self.io = io
        self.metrics = io.metrics
        self.file = file
        self.interval = interval
        self.logs: LogsDetector | None = None
        self._next = time.monotonic() + interval

    def tick(self, detector: Any, now: float | None = None) -> None:
        """Write a checkpoint when ``interval`` seconds passed since the last one began
        (or five times as long as the last one took, if that is longer)."""
        now = time.monotonic() if now is None else now
        if now >= self._next:
            self.checkpoint(detector)
            took = time.monotonic() - now
            # (at most a fifth of the time spent writing checkpoints, however many traces)
            self._next = now + max(self.interval, 5 * took)

    def checkpoint(self, detector: Any) -> int:
        """Write every open trace (the most recently used first), then the grouped and log
        runs, then the conversations, within the size bound, to the checkpoint file;
        returns how many traces and runs were written. The detector's lock is held for a
        few traces at a time (each trace is consistent; the checkpoint as a whole is not
        an instant: requests go on while it is written)."""
        cp = self.file
        traces = _Entries(self.io, cp.max_bytes)
        with detector.locked():
            order = list(reversed(detector.traces.open.traces))  # (the most recently used first)
        for start in range(0, len(order), _CHECKPOINT_CHUNK):
            # A chunk of traces at a time under the detector's lock: each trace is written
            # whole, and requests go on between chunks.
            with detector.locked():
                table, now = detector.traces, time.monotonic()
                for trace_id in order[start:start + _CHECKPOINT_CHUNK]:
                    traces.add(export_trace(table, trace_id, now))
        runs = _Entries(self.io, cp.max_bytes - traces.size)
        self._add_runs(detector, runs)
        conversations = self._conversations(detector, cp.max_bytes - traces.size - runs.size, cp.path)
        try:
            cp.write(self.io.dumps({"written": time.time(), "entries": traces.data, "runs": runs.data,
                                    "conversations": conversations}))
        except (OSError, StateError) as exc:
            self.metrics.add("progress.service.state.errors", 1, {"op": "checkpoint"})
            self.io.warn("checkpoint", "otel-progress: cannot write the checkpoint %s: %s", cp.path, exc)
            return 0
        self.metrics.add("progress.service.state.checkpoints")
        if traces.left_out or runs.left_out:
            self.io.warn("bound", "otel-progress: checkpoint %s holds %d traces and %d other runs; %d least recently"
                         " used left out (--checkpoint-max-mib)", cp.path, len(traces.data), len(runs.data),
                         traces.left_out + runs.left_out)
        return len(traces.data) + len(runs.data)

    def _add_runs(self, detector: Any, runs: _Entries) -> None:
        """Add the grouped runs and the log runs (the most recently seen first)."""
        with detector.locked():
            table, now = detector.traces, time.monotonic()
            for key in table.groups.open_keys():
                runs.add(export_group(table, key, now))
        logs = self.logs
        if logs is not None:
            with logs.locked():
                now = time.monotonic()
                for key in logs.run_keys():
                    runs.add(logs.export_run(key, now))

    def _conversations(self, detector: Any, room: int, path: str) -> bytes:
        """The conversations the engine follows across traces, encoded (empty: none, or
        more than ``room`` bytes: then a warning)."""
        with detector.locked():
            state = detector.traces.engine.conversation_state()
            if not state:
                return b""
            try:
                data = self.io.dumps(state)
            except StateError:
                return b""
        if len(data) > room:
            self.io.warn("bound-conversations", "otel-progress: checkpoint %s leaves out the conversations followed"
                         " across traces (%d bytes past --checkpoint-max-mib)", path, len(data))
            return b""
        return data

    def restore(self, detector: Any) -> int:
        """Continue the traces, runs and conversations of the checkpoint file (at start);
        returns how many traces and runs. A corrupt or foreign checkpoint is a warning and
        an empty start."""
        cp = self.file
        try:
            data = cp.read()
        except OSError as exc:
            self.io.foreign("checkpoint", f"checkpoint {cp.path} cannot be read: {exc}")
            return 0
        if data is None:
            return 0
        snapshot = self.io.decode(data, f"checkpoint {cp.path}")
        if snapshot is None:
            return 0
        if not isinstance(snapshot, dict) or not isinstance(snapshot.get("entries"), list):
            self.io.foreign("checkpoint", f"checkpoint {cp.path}: not a checkpoint; starting empty")
            return 0
        try:
            elapsed = max(0.0, time.time() - float(snapshot.get("written", time.time())))
        except (TypeError, ValueError):
            elapsed = 0.0
        bundles = [b for d in snapshot["entries"]
                   if isinstance(b := self.io.decode(d, "checkpoint entry"), TraceBundle)]
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
                    self.io.foreign("checkpoint", f"checkpoint entry of trace {bundle.trace_id} cannot be"
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
        bundles = [b for d in entries if isinstance(b := self.io.decode(d, "checkpoint entry"), RunBundle)]
        restored = 0
        for bundle in reversed(bundles):  # (least recently seen first)
            bundle.idle += elapsed
            bundle.engine_idle += elapsed
            target = self.logs if bundle.kind == "log" else detector
            if target is None:
                self.io.foreign("checkpoint", f"checkpoint entry of log run {bundle.key}: this service reads no logs")
                continue
            try:
                with target.locked():
                    continue_state(target if bundle.kind == "log" else detector.traces, bundle, now)
            except Exception as exc:
                self.io.foreign("checkpoint", f"checkpoint entry of {store_key(bundle)} cannot be continued: {exc!r}")
                continue
            restored += 1
        return restored

    def _restore_conversations(self, detector: Any, data: Any, elapsed: float, path: str) -> int:
        """Continue the conversations of a checkpoint (``data``: their encoded state)."""
        if not isinstance(data, bytes) or not data:
            return 0
        state = self.io.decode(data, f"checkpoint {path} (conversations)")
        if not isinstance(state, dict):
            return 0
        try:
            with detector.locked():
                return int(detector.traces.engine.adopt_conversations(state, elapsed))
        except Exception as exc:  # a state that does not fit: the conversations start afresh
            self.io.foreign("checkpoint", f"checkpoint {path}: its conversations cannot be continued: {exc!r}")
            return 0
