"""Run tracking for log input: observations grouped into runs and fed to the engine.

Log records of one run (one coding agent's session and prompt, see each reader's
``run_key``) arrive interleaved with other runs' and, across export batches, not always in
order. :class:`LogRunTracker` keeps, per run, a bounded reorder buffer sorted by the
reader's ``order`` key; an observation leaves the buffer (tool calls to
:meth:`~otel_progress.engine.ProgressEngine.observe`, tokens to ``record_tokens``,
compactions to :meth:`~otel_progress.engine.ProgressEngine.compaction`, between the calls
around them; one that names only its session goes to the session's run seen last) when the
buffer holds more than ``reorder_window`` of them, or when the caller releases it
(:meth:`release`, e.g. after each export request in the service). A run ends at
:meth:`finish` (end of input: ``scan``), when idle for ``idle_seconds`` (:meth:`end_idle`:
``serve``), or, when more than ``max_runs`` are open, the least recently seen is ended
first. Memory is bounded by ``max_runs`` x ``reorder_window`` observations.

One tracker serves ``scan`` and ``serve``: the engine key of a run is its ``run_key``
(trace id and run id both), and each tool call without an id of its own gets a stable one
derived from the record (``log:`` + 12 hex digits), so a record delivered twice (an export
retried) is counted once by the engine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from ..engine import ProgressEngine, RunSummary
from ..model import Detection
from . import read_log
from .base import LogObservation
from .record import LogRecordView

__all__ = ["DEFAULT_REORDER_WINDOW", "FED_KINDS", "LogRun", "LogRunTracker", "RunEnd"]

#: Observations held per run before the earliest is fed to the engine.
DEFAULT_REORDER_WINDOW = 256
#: The observation kinds fed to the engine (tool calls, tokens, compaction boundaries).
FED_KINDS = frozenset({"tool", "tokens", "compaction"})


@dataclasses.dataclass
class LogRun:
    """One open run: its reorder buffer and what annotation needs (the resource and scope
    of its records, and which record each tool call came from).

    Attributes:
        run_key: the reader's run key (the engine's trace and run id).
        agent: the agent's name, once known.
        resource, scope: of the run's latest record (where a detection record goes).
        last_seen: the tracker's clock at the run's latest record.
        first_ns: the time of the run's first record (Unix ns; 0 if unknown).
        records: tool call id -> the caller's reference of its record (bounded).
    """

    run_key: str
    agent: str | None = None
    resource: Any = None
    scope: Any = None
    last_seen: float = 0.0
    first_ns: int = 0
    buffer: list[tuple[Any, int, LogObservation]] = dataclasses.field(default_factory=list)
    records: OrderedDict[str, Hashable] = dataclasses.field(default_factory=OrderedDict)


@dataclasses.dataclass(frozen=True)
class RunEnd:
    """A run that ended: its engine summary (``None`` if it never reached the engine) and
    the detections its last release brought."""

    run: LogRun
    summary: RunSummary | None
    detections: tuple[Detection, ...]


_MAX_REFS = 4096


def _orderable(order: Any) -> tuple:
    """A sort key that never raises on comparison: the reader's tuple with each part typed."""
    if not isinstance(order, tuple):
        order = (order,)
    return tuple((0, p) if isinstance(p, (int, float)) and not isinstance(p, bool) else (1, str(p)) for p in order)


class LogRunTracker:
    """Groups log observations into runs, orders them and feeds the engine (see module).

    ``read`` is the reader registry (:func:`otel_progress.logs.read_log` by default).
    """

    def __init__(
        self,
        engine: ProgressEngine,
        *,
        reorder_window: int = DEFAULT_REORDER_WINDOW,
        max_runs: int | None = None,
        idle_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        read: Callable[[LogRecordView], LogObservation | None] = read_log,
    ) -> None:
        self.engine = engine
        self.reorder_window = max(0, int(reorder_window))
        self.max_runs = int(max_runs if max_runs is not None else engine.config.max_runs)
        self.idle_seconds = float(idle_seconds if idle_seconds is not None else engine.config.run_ttl_seconds)
        self.clock = clock
        self.read = read
        self.runs: OrderedDict[str, LogRun] = OrderedDict()
        self.records_read = 0
        self.observations = 0
        self.runs_evicted = 0
        self._seq = itertools.count()

    # -- input ------------------------------------------------------------------------

    def add(self, record: LogRecordView, ref: Hashable = None, *, resource: Any = None,
            scope: Any = None) -> tuple[list[Detection], list[RunEnd]]:
        """Read one record; buffer what it holds. Returns the detections of the
        observations this pushes out of the buffer, and the runs ended to stay within
        ``max_runs``. ``ref`` (any hashable) identifies the record to the caller (it comes
        back in :attr:`LogRun.records`); ``resource``/``scope`` are kept for annotation."""
        self.records_read += 1
        observation = self.read(record)
        if observation is None or observation.kind not in FED_KINDS:
            return [], []
        return self.add_observation(observation, record, ref, resource=resource, scope=scope)

    def resolve(self, observation: LogObservation) -> LogObservation | None:
        """The observation with its run: a ``session_wide`` one (its ``run_key`` names the
        session only) belongs to the session's run seen last (``None``: no run of the
        session is open); any other as it is."""
        if not observation.session_wide:
            return observation
        prefix = observation.run_key
        for key in reversed(self.runs):
            if key.startswith(prefix):
                return observation._replace(run_key=key, session_wide=False)
        return None

    def add_observation(self, observation: LogObservation, record: LogRecordView | None = None,
                        ref: Hashable = None, *, resource: Any = None,
                        scope: Any = None) -> tuple[list[Detection], list[RunEnd]]:
        """Buffer one observation (see :meth:`add`)."""
        ended: list[RunEnd] = []
        if observation.session_wide:
            resolved = self.resolve(observation)
            if resolved is None:
                return [], ended  # a session-wide record before any run of its session: nothing before it
            observation = resolved
        key = observation.run_key
        run = self.runs.get(key)
        if run is None:
            while len(self.runs) >= self.max_runs > 0:
                ended.append(self._end(next(iter(self.runs))))
                self.runs_evicted += 1
            run = self.runs[key] = LogRun(key)
        else:
            self.runs.move_to_end(key)
        run.last_seen = self.clock()
        run.agent = run.agent or observation.agent
        if record is not None and not run.first_ns:
            run.first_ns = record.time_ns
        if resource is not None:
            run.resource = resource
        if scope is not None:
            run.scope = scope
        if observation.kind == "tool" and observation.call is not None:
            call = observation.call
            call_id = self.call_id(observation, record)
            observation = observation._replace(call=dataclasses.replace(
                call, trace_id=key, run_id=key, span_id=call_id, agent=call.agent or observation.agent))
            if ref is not None:
                run.records[call_id] = ref
                if len(run.records) > _MAX_REFS:
                    run.records.popitem(last=False)
        elif observation.kind == "compaction" and observation.compaction is not None:
            record_id = self.call_id(observation, record)  # a detection on it goes on its record
            observation = observation._replace(compaction=dataclasses.replace(
                observation.compaction, trace_id=key, run_id=key, span_id=record_id,
                agent=observation.compaction.agent or observation.agent))
            if ref is not None:
                run.records[record_id] = ref
        self.observations += 1
        heapq.heappush(run.buffer, (_orderable(observation.order), next(self._seq), observation))
        out: list[Detection] = []
        while len(run.buffer) > self.reorder_window:
            out.extend(self._feed(run, heapq.heappop(run.buffer)[2]))
        return out, ended

    @staticmethod
    def call_id(observation: LogObservation, record: LogRecordView | None = None) -> str:
        """The id the engine knows a tool call by: the reader's (``call.span_id``), else one
        derived from the record (stable: the same record gives the same id)."""
        call = observation.call
        if call is not None and call.span_id:
            return call.span_id
        return _stable_id(observation.run_key, observation, record)

    def release(self, run_key: str | None = None) -> list[Detection]:
        """Feed everything buffered (of one run, or of all) to the engine, in order."""
        out: list[Detection] = []
        runs = [self.runs[run_key]] if run_key in self.runs else ([] if run_key is not None else
                                                                   list(self.runs.values()))
        for run in runs:
            out.extend(self._drain(run))
        return out

    # -- ends -------------------------------------------------------------------------

    def end_idle(self, now: float | None = None) -> list[RunEnd]:
        """End the runs idle for longer than ``idle_seconds``."""
        limit = (self.clock() if now is None else now) - self.idle_seconds
        ended: list[RunEnd] = []
        while self.runs:
            key, run = next(iter(self.runs.items()))
            if run.last_seen > limit:
                break
            ended.append(self._end(key))
        return ended

    def finish(self) -> list[RunEnd]:
        """End every open run (end of input)."""
        return [self._end(key) for key in list(self.runs)]

    # -- internals --------------------------------------------------------------------

    def _drain(self, run: LogRun) -> list[Detection]:
        out: list[Detection] = []
        while run.buffer:
            out.extend(self._feed(run, heapq.heappop(run.buffer)[2]))
        out.extend(self.engine.flush(run.run_key, run.run_key))
        return out

    def _feed(self, run: LogRun, observation: LogObservation) -> list[Detection]:
        if observation.kind == "tokens":
            self.engine.record_tokens(run.run_key, run.run_key, observation.tokens)
            return []
        if observation.kind == "compaction" and observation.compaction is not None:
            return self.engine.compaction(observation.compaction)
        if observation.call is None:
            return []
        return self.engine.observe(observation.call)

    def _end(self, key: str) -> RunEnd:
        run = self.runs.pop(key)
        detections = self._drain(run)
        summaries = self.engine.end_trace(key)
        summary = summaries[0] if summaries else None
        if summary is not None:
            detections.extend(summary.detections_list)
        return RunEnd(run, summary, tuple(detections))


def _stable_id(run_key: str, observation: LogObservation, record: LogRecordView | None) -> str:
    """An id for a tool call whose record has none: the same for the same record."""
    call = observation.call
    parts = [run_key, repr(observation.order), call.name if call is not None else ""]
    if record is not None:
        parts += [str(record.time_ns), str(record.observed_ns), record.event_name]
    return "log:" + hashlib.sha1("\x1f".join(parts).encode("utf-8", "replace")).hexdigest()[:12]
