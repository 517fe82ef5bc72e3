"""Runs of log input: observations of coding agents' log records, grouped, ordered, ended.

Log records of one run (one coding agent's session and prompt, see each reader's
``run_key``) arrive interleaved with other runs' and, across export batches, not always in
order. :class:`LogRunTracker` keeps, per run, a bounded reorder buffer sorted by the
reader's ``order`` key; an observation leaves the buffer (tool calls, tokens and compactions
to the run model, a compaction between the calls around it) when the buffer holds more than
``reorder_window`` of them, or when the caller releases it (:meth:`~LogRunTracker.release`,
e.g. after each export request in the service). An observation that names only its session
(``session_wide``: Gemini CLI's ``chat_compression`` has no prompt id) belongs to the
session's run seen last (:meth:`~LogRunTracker.resolve`).

A run ends

* explicitly, when its session ends (a ``session.end`` event: Qwen Code), see
  :data:`SESSION_END_EVENTS`;
* at :meth:`~LogRunTracker.finish` (end of input: ``scan``);
* when idle for ``idle_seconds`` (:meth:`~LogRunTracker.end_idle`: ``serve``);
* when more than ``max_runs`` are open, or the memory budget is short
  (:meth:`~LogRunTracker.evict`): the least recently seen first, counted in
  :attr:`~LogRunTracker.runs_evicted` and reported by the caller.

Every end goes through the engine (:meth:`~otel_progress.runs.model.RunModel.end_trace`):
what the run found is kept and it is summarised like any run. Memory is bounded by
``max_runs`` x ``reorder_window`` observations, and estimated (:attr:`held_bytes`) for the
service's budget.

One tracker serves ``scan`` and ``serve``: the engine key of a run is its ``run_key`` (trace
id and run id both), and each tool call without an id of its own gets a stable one derived
from the record (``log:`` + 12 hex digits), so a record delivered twice (an export retried)
is counted once by the engine.
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

from ..conventions.logs import read_log
from ..conventions.logs.base import LogObservation
from ..conventions.logs.record import LogRecordView
from ..engine import ProgressEngine, RunSummary
from ..model import Detection
from .identity import log_session
from .model import RunModel
from .signals import LOGS

__all__ = ["DEFAULT_REORDER_WINDOW", "FED_KINDS", "LOG_RUN_BYTES", "OBSERVATION_BYTES", "SESSION_END_EVENTS",
           "LogRun", "LogRunTracker", "RunEnd"]

#: Observations held per run before the earliest is fed to the engine.
DEFAULT_REORDER_WINDOW = 256
#: The observation kinds fed to the run model (tool calls, tokens, compaction boundaries,
#: other detectors' verdicts).
FED_KINDS = frozenset({"tool", "tokens", "compaction", "verdict"})
#: Event names that end every run of the record's session.
SESSION_END_EVENTS = frozenset({"session.end"})
# Estimated bytes of one open log run (the tracker's entry, the engine's trace and run
# state, the service's annotation place) and of one buffered observation (its call, with
# arguments): calibrated with tracemalloc (tests/logs/test_log_runs.py).
LOG_RUN_BYTES = 8 * 1024
OBSERVATION_BYTES = 1024
_MAX_REFS = 4096


@dataclasses.dataclass
class LogRun:
    """One open run: its reorder buffer and what annotation needs (the resource and scope
    of its records, and which record each tool call came from).

    Attributes:
        run_key: the reader's run key (the engine's trace and run id).
        agent: the agent's name, once known.
        session: the agent session its records name (``session.id``, ``conversation.id``).
        resource, scope: of the run's latest record (where a detection record goes).
        last_seen: the tracker's clock at the run's latest record.
        first_ns: the time of the run's first record (Unix ns; 0 if unknown).
        records: tool call id -> the caller's reference of its record (bounded).
    """

    run_key: str
    agent: str | None = None
    session: str | None = None
    resource: Any = None
    scope: Any = None
    last_seen: float = 0.0
    first_ns: int = 0
    buffer: list[tuple[Any, int, LogObservation]] = dataclasses.field(default_factory=list)
    records: OrderedDict[str, Hashable] = dataclasses.field(default_factory=OrderedDict)


@dataclasses.dataclass(frozen=True)
class RunEnd:
    """A run that ended: its engine summary (``None`` if it never reached the engine), the
    detections its last release brought, and why it ended (``finish``, ``idle``,
    ``session_end``, ``max_runs``, ``memory_budget``)."""

    run: LogRun
    summary: RunSummary | None
    detections: tuple[Detection, ...]
    why: str = "finish"


def _orderable(order: Any) -> tuple:
    """A sort key that never raises on comparison: the reader's tuple with each part typed."""
    if not isinstance(order, tuple):
        order = (order,)
    return tuple((0, p) if isinstance(p, (int, float)) and not isinstance(p, bool) else (1, str(p)) for p in order)


class LogRunTracker:
    """Groups log observations into runs, orders them and feeds the run model (see module).

    ``engine``: a :class:`~otel_progress.runs.model.RunModel` (shared with the span paths,
    so that one agent's logs and traces are reported once), or an engine. ``read`` is the
    reader registry (:func:`otel_progress.conventions.logs.read_log` by default).
    """

    def __init__(
        self,
        engine: RunModel | ProgressEngine,
        *,
        reorder_window: int = DEFAULT_REORDER_WINDOW,
        max_runs: int | None = None,
        idle_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        read: Callable[[LogRecordView], LogObservation | None] = read_log,
    ) -> None:
        self.model = engine if isinstance(engine, RunModel) else RunModel(engine)
        self.engine = self.model.engine
        config = self.engine.config
        self.reorder_window = max(0, int(reorder_window))
        self.max_runs = int(max_runs if max_runs is not None else config.max_runs)
        self.idle_seconds = float(idle_seconds if idle_seconds is not None else config.run_ttl_seconds)
        self.clock = clock
        self.read = read
        self.runs: OrderedDict[str, LogRun] = OrderedDict()
        self.records_read = 0
        self.observations = 0
        self.runs_evicted = 0
        self._buffered = 0
        self._seq = itertools.count()

    @property
    def held_bytes(self) -> int:
        """Estimated bytes the open runs hold (see :data:`LOG_RUN_BYTES`)."""
        return LOG_RUN_BYTES * len(self.runs) + OBSERVATION_BYTES * self._buffered

    # -- input ------------------------------------------------------------------------

    def add(self, record: LogRecordView, ref: Hashable = None, *, resource: Any = None,
            scope: Any = None) -> tuple[list[Detection], list[RunEnd]]:
        """Read one record; buffer what it holds. Returns the detections of the
        observations this pushes out of the buffer, and the runs it ended (its session
        ended, or to stay within ``max_runs``). ``ref`` (any hashable) identifies the record
        to the caller (it comes back in :attr:`LogRun.records`); ``resource``/``scope`` are
        kept for annotation."""
        self.records_read += 1
        observation = self.read(record)
        if observation is None or observation.kind not in FED_KINDS:
            if record.event_name in SESSION_END_EVENTS:
                return [], self.end_session(log_session(record.attributes))
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
                ended.append(self._end(next(iter(self.runs)), "max_runs"))
            run = self.runs[key] = LogRun(key)
        else:
            self.runs.move_to_end(key)
        run.last_seen = self.clock()
        run.agent = run.agent or observation.agent
        if record is not None:
            if not run.first_ns:
                run.first_ns = record.time_ns
            if run.session is None:
                run.session = log_session(record.attributes)
        if resource is not None:
            run.resource = resource
        if scope is not None:
            run.scope = scope
        observation = self._keyed(run, observation, record, ref)
        self.observations += 1
        self._buffered += 1
        heapq.heappush(run.buffer, (_orderable(observation.order), next(self._seq), observation))
        out: list[Detection] = []
        while len(run.buffer) > self.reorder_window:
            out.extend(self._feed(run, heapq.heappop(run.buffer)[2]))
        return out, ended

    def _keyed(self, run: LogRun, observation: LogObservation, record: LogRecordView | None,
               ref: Hashable) -> LogObservation:
        """The observation with its run's engine keys and its id (a tool call's, a
        compaction's: a detection on it goes on its record), the caller's ``ref`` noted."""
        key = run.run_key
        if observation.kind == "tool" and observation.call is not None:
            call = observation.call
            record_id = self.call_id(observation, record)
            observation = observation._replace(call=dataclasses.replace(
                call, trace_id=key, run_id=key, span_id=record_id, agent=call.agent or observation.agent))
        elif observation.kind == "compaction" and observation.compaction is not None:
            compaction = observation.compaction
            record_id = self.call_id(observation, record)
            observation = observation._replace(compaction=dataclasses.replace(
                compaction, trace_id=key, run_id=key, span_id=record_id, agent=compaction.agent or observation.agent))
        elif observation.output is not None:
            record_id = self.call_id(observation, record)
            observation = observation._replace(output=dataclasses.replace(
                observation.output, trace_id=key, run_id=key, span_id=record_id,
                agent=observation.output.agent or observation.agent))
        else:
            return observation
        if ref is not None:
            run.records[record_id] = ref
            if len(run.records) > _MAX_REFS:
                run.records.popitem(last=False)
        return observation

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
            ended.append(self._end(key, "idle"))
        return ended

    def end_session(self, session: str | None) -> list[RunEnd]:
        """The agent session ended (an explicit end event): end its runs."""
        if not session:
            return []
        return [self._end(key, "session_end") for key, run in list(self.runs.items()) if run.session == session]

    def evict(self, count: int = 1, why: str = "memory_budget") -> list[RunEnd]:
        """End the ``count`` least recently seen runs early (a budget is short)."""
        return [self._end(next(iter(self.runs)), why) for _ in range(min(count, len(self.runs)))]

    def finish(self) -> list[RunEnd]:
        """End every open run (end of input)."""
        return [self._end(key, "finish") for key in list(self.runs)]

    # -- carried to another process (runs.carry) ---------------------------------------

    def forget(self, key: str) -> LogRun | None:
        """Drop an open run without ending it (its state is replaced by another process's:
        no detection, no summary)."""
        run = self.runs.pop(key, None)
        if run is not None:
            self._buffered -= len(run.buffer)
            self.engine.discard_trace(key)
        return run

    def adopt(self, run: LogRun, last_seen: float) -> None:
        """Continue ``run`` (carried from another process, its engine state adopted), last
        seen at ``last_seen`` on this tracker's clock; the runs stay least recently seen
        first (:meth:`end_idle` stops at the first one not idle)."""
        old = self.runs.pop(run.run_key, None)
        if old is not None:
            self._buffered -= len(old.buffer)
        run.last_seen = last_seen
        runs = self.runs
        in_order = not runs or next(reversed(runs.values())).last_seen <= last_seen
        runs[run.run_key] = run
        self._buffered += len(run.buffer)
        seq = self._seq
        run.buffer = [(order, next(seq), obs) for order, _n, obs in run.buffer]
        heapq.heapify(run.buffer)
        if not in_order:
            self.runs = OrderedDict(sorted(runs.items(), key=lambda kv: kv[1].last_seen))

    # -- internals --------------------------------------------------------------------

    def _drain(self, run: LogRun) -> list[Detection]:
        out: list[Detection] = []
        while run.buffer:
            out.extend(self._feed(run, heapq.heappop(run.buffer)[2]))
        out.extend(self.model.flush(run.run_key, run.run_key))
        return out

    def _feed(self, run: LogRun, observation: LogObservation) -> list[Detection]:
        self._buffered -= 1
        if observation.kind == "tokens":
            self.model.tokens(run.run_key, run.run_key, observation.tokens, observation.input_tokens)
            return [] if observation.output is None else self.model.model_output(observation.output)
        if observation.kind == "compaction" and observation.compaction is not None:
            return self.model.compaction(observation.compaction)
        if observation.kind == "verdict" and observation.verdict is not None:
            self.model.verdict(observation.verdict, run.run_key, run.run_key)  # kept, never reported
            return []
        if observation.call is None:
            return []
        return self.model.tool(observation.call, session=run.session, signal=LOGS)

    def _end(self, key: str, why: str) -> RunEnd:
        run = self.runs.pop(key)
        if why in ("max_runs", "memory_budget"):
            self.runs_evicted += 1
        detections = self._drain(run)
        more, summaries = self.model.end_trace(key)
        detections.extend(more)
        return RunEnd(run, summaries[0] if summaries else None, tuple(detections), why)


def _stable_id(run_key: str, observation: LogObservation, record: LogRecordView | None) -> str:
    """An id for a tool call whose record has none: the same for the same record."""
    call = observation.call
    parts = [run_key, repr(observation.order), call.name if call is not None else ""]
    if record is not None:
        parts += [str(record.time_ns), str(record.observed_ns), record.event_name]
    return "log:" + hashlib.sha1("\x1f".join(parts).encode("utf-8", "replace")).hexdigest()[:12]

