"""The engine: per-trace, per-run state and the public API the adapters call.

Feed tool calls one at a time with :meth:`ProgressEngine.observe`; they are grouped into
runs by ``(trace_id, run_id)`` and released in start-time order: up to ``reorder_window``
calls wait in a buffer, so calls arriving in any order within that allowance are
evaluated in the order they started. :meth:`flush` releases what is buffered (call it when no other tool call of
the run is in flight, or after a batch of spans), :meth:`end_run` when an agent
invocation finishes (this evaluates the run-scope signature when it was a sub-agent), and
:meth:`end_trace` when the trace is done. State is bounded: at most ``max_runs`` runs are
kept (least recently used traces are evicted first) and idle traces are dropped after
``run_ttl_seconds`` by :meth:`evict_idle`.

The engine is thread-safe (one lock) and never raises on bad input: a call it cannot
read is counted in :attr:`stats` and skipped.
"""

from __future__ import annotations

import logging
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from ..evidence.canonical import Digester
from ..model import Compaction, Detection, Level, Scope, ToolCall
from .config import Config
from .digests import admit
from .escalation import handoff_note, nudge_text
from .pipeline import Pipeline
from .runstate import RunState
from .signals import RunSignatureSignal, build_signals
from .step import Step

__all__ = ["EngineStats", "ProgressEngine", "RunSummary"]

_log = logging.getLogger(__name__)

#: The order calls are evaluated in: start time, then end time, then span id.
_start_order = attrgetter("start_ns", "end_ns", "span_id")


@dataclass
class EngineStats:
    """Counters about what the engine has seen and dropped."""

    calls: int = 0
    steps: int = 0
    detections: int = 0
    suppressed: int = 0
    duplicates: int = 0
    late_calls: int = 0
    unreadable: int = 0
    runs_evicted: int = 0
    traces_evicted: int = 0
    errors: int = 0
    compactions: int = 0


@dataclass(frozen=True)
class RunSummary:
    """What happened in one run, reported when it ends."""

    trace_id: str
    run_id: str
    agent: str | None
    turns: int
    tokens: int
    detections: int
    level: int
    first_detection_turn: int | None
    wasted_turns: int
    wasted_tokens: int
    late_calls: int
    detections_list: tuple[Detection, ...] = field(default=())


class TraceState:
    """The runs of one trace and the run-scope (cross-agent) state."""

    __slots__ = (
        "detections",
        "evidence",
        "evidence_run",
        "evidence_version",
        "last_seen",
        "level",
        "pipeline",
        "plan_node",
        "run_signature_state",
        "runs",
        "tokens",
        "trace_id",
    )

    def __init__(self, trace_id: str, pipeline: Pipeline, now: float) -> None:
        self.trace_id = trace_id
        self.pipeline = pipeline
        self.runs: dict[str, RunState] = {}
        self.evidence = array("q")  # sorted distinct result digests of all runs
        self.evidence_version = 0
        # The run whose evidence is, for now, the trace's own (see admit_from), or None.
        self.evidence_run: RunState | None = None
        self.plan_node: str | None = None
        self.tokens = 0
        self.level = 0
        self.detections = 0
        self.run_signature_state: Any = None
        self.last_seen = now

    def admit(self, digest: int) -> None:
        """Admit a result digest to the trace-wide evidence."""
        if admit(self.evidence, digest, self.pipeline.config.max_evidence * 4):
            self.evidence_version += 1

    def admit_from(self, run: RunState, digest: int) -> None:
        """Admit a result digest that ``run``, one of this trace's runs, is about to admit
        to its own evidence.

        While one run alone has admitted results to the trace, the trace's evidence is
        the same set as that run's, with the same version: both received the same
        digests in the same order, and neither was emptied (the run's evidence fills up
        first, at a quarter of the trace's cap). It is then not stored twice:
        ``evidence_run`` stands for it. It is copied out (:meth:`detach`) before it could
        differ: when another run admits a result, when the run's evidence is full (its
        next admission may empty it) and when the run ends.
        """
        owner = self.evidence_run
        if owner is run:
            if len(run.evidence) < self.pipeline.config.max_evidence:
                return
            self.detach()
        elif owner is not None:
            self.detach()
        elif self.evidence_version == 0:
            self.evidence_run = run  # the first result admitted to the trace
            return
        self.admit(digest)

    def detach(self) -> None:
        """Give the trace its own copy of the evidence it shares with a run, if it does."""
        owner = self.evidence_run
        if owner is not None:
            self.evidence = array("q", owner.evidence)
            self.evidence_version = owner.evidence_version
            self.evidence_run = None

    def trace_signature(self) -> int:
        """The run-scope signature: shared evidence and the current plan node."""
        owner = self.evidence_run
        version = self.evidence_version if owner is None else owner.evidence_version
        return self.pipeline.digester.text(f"{version}\x1f{self.plan_node or ''}")

    def hex(self, digest: int) -> str:
        return self.pipeline.digester.hex(digest)


class ProgressEngine:
    """Detects runs that stopped making progress, from their tool calls.

    Args:
        config: thresholds, manifest and digest key; defaults to :class:`Config` read
            from the environment (``Config.from_env()``).
    """

    def __init__(self, config: Config | None = None) -> None:
        self.config = config if config is not None else Config.from_env()
        self.digester = Digester(self.config.digest_key, self.config.volatile_keys)
        self.pipeline = Pipeline(self.config, build_signals(self.config), self.digester)
        self._run_signal = (
            RunSignatureSignal(self.config) if self.config.enabled("run_signature") else None
        )
        self._traces: OrderedDict[str, TraceState] = OrderedDict()
        self._run_count = 0
        self._lock = threading.RLock()
        self.stats = EngineStats()

    # -- state ------------------------------------------------------------------------

    @property
    def active_runs(self) -> int:
        """Runs currently tracked."""
        return self._run_count

    @property
    def active_traces(self) -> int:
        """Traces currently tracked."""
        return len(self._traces)

    def _trace(self, trace_id: str, now: float) -> TraceState:
        trace = self._traces.get(trace_id)
        if trace is None:
            trace = self._traces[trace_id] = TraceState(trace_id, self.pipeline, now)
        else:
            self._traces.move_to_end(trace_id)
            trace.last_seen = now
        return trace

    def _run(self, trace: TraceState, run_id: str, agent: str | None) -> RunState:
        run = trace.runs.get(run_id)
        if run is None:
            run = trace.runs[run_id] = RunState(self.pipeline, trace, run_id, agent)
            self._run_count += 1
            self._enforce_cap(keep=trace.trace_id)
        elif agent and not run.agent:
            run.agent = agent
        return run

    def _enforce_cap(self, keep: str) -> None:
        while self._run_count > self.config.max_runs and len(self._traces) > 1:
            trace_id, _trace = next(iter(self._traces.items()))
            if trace_id == keep:
                self._traces.move_to_end(trace_id)
                continue
            self._drop_trace(trace_id, evicted=True)

    def _drop_trace(self, trace_id: str, evicted: bool = False) -> TraceState | None:
        trace = self._traces.pop(trace_id, None)
        if trace is None:
            return None
        self._run_count -= len(trace.runs)
        if evicted:
            self.stats.traces_evicted += 1
            self.stats.runs_evicted += len(trace.runs)
        return trace

    # -- input ------------------------------------------------------------------------

    def observe(self, call: ToolCall, *, flush: bool = False, now: float | None = None) -> list[Detection]:
        """Add one tool call to its run; return the detections of the steps it completes.

        With ``flush=True`` everything buffered for the run is released (the caller
        knows no other call of the run is in flight).
        """
        if not call.executed:
            return []  # a call that never ran (denied, awaiting approval): not a step
        try:
            with self._lock:
                self.stats.calls += 1
                trace = self._trace(call.trace_id, time.monotonic() if now is None else now)
                run = trace.runs.get(call.run_id)
                if run is None or (call.agent and not run.agent):
                    run = self._run(trace, call.run_id, call.agent)
                if not run.remember(call.span_id):
                    run.duplicates += 1
                    self.stats.duplicates += 1
                    return []
                if call.start_ns < run.watermark_ns:
                    run.late += 1
                    self.stats.late_calls += 1
                pending = run.pending
                if flush and not pending:
                    # Nothing buffered: the call is a step of its own, as _release would find.
                    return self._evaluate(run, [call])
                pending.append(call)
                if len(pending) > 1 and _start_order(call) < _start_order(pending[-2]):
                    # Out of start order: re-sort (stable, as appending in order would be).
                    pending.sort(key=_start_order)
                return self._release(run, flush)
        except Exception:  # never raise into the caller
            self.stats.errors += 1
            _log.debug("otel-progress: observe failed", exc_info=True)
            return []

    def observe_many(self, calls: Iterable[ToolCall]) -> list[Detection]:
        """Observe calls of any runs, then flush every run they touched."""
        out: list[Detection] = []
        touched: dict[tuple[str, str], None] = {}
        for call in calls:
            out.extend(self.observe(call))
            touched[(call.trace_id, call.run_id)] = None
        for trace_id, run_id in touched:
            out.extend(self.flush(trace_id, run_id))
        return out

    def compaction(self, compaction: Compaction, *, now: float | None = None) -> list[Detection]:
        """The run's context was compacted at ``compaction.time_ns`` (the agent replaced its
        conversation by a summary): a boundary between its steps. The calls buffered for the
        run that started before it are evaluated first (as steps before the boundary); then
        the boundary (signals/compaction.py): the re-read after it is expected once, the
        run's evidence is kept, and compactions in a row with nothing new between them are
        a ``compaction_livelock``. Returns the detections; one reported twice (the same
        ``span_id``) is counted once."""
        try:
            with self._lock:
                trace = self._trace(compaction.trace_id, time.monotonic() if now is None else now)
                run = trace.runs.get(compaction.run_id)
                if run is None or (compaction.agent and not run.agent):
                    run = self._run(trace, compaction.run_id, compaction.agent)
                if compaction.span_id and not run.remember(compaction.span_id):
                    run.duplicates += 1
                    self.stats.duplicates += 1
                    return []
                out = self._release_before(run, compaction.time_ns)
                self.stats.compactions += 1
                det = self.pipeline.compaction(run, compaction)
                if det is not None:
                    self.stats.detections += 1
                    out.append(det)
                return out
        except Exception:  # never raise into the caller
            self.stats.errors += 1
            _log.debug("otel-progress: compaction failed", exc_info=True)
            return []

    def record_tokens(self, trace_id: str, run_id: str, tokens: int, *, now: float | None = None) -> None:
        """Add tokens a run's model calls consumed (from ``gen_ai.usage.*``)."""
        try:
            tokens = int(tokens)
        except (TypeError, ValueError, OverflowError):
            return
        if tokens <= 0:
            return
        with self._lock:
            trace = self._trace(trace_id, time.monotonic() if now is None else now)
            run = self._run(trace, run_id, None)
            run.tokens += tokens
            trace.tokens += tokens

    def set_plan_node(self, trace_id: str, node: str | None) -> None:
        """Record the trace's current plan node (for the run-scope signature)."""
        with self._lock:
            trace = self._traces.get(trace_id)
            if trace is not None and node:
                trace.plan_node = node

    def flush(self, trace_id: str, run_id: str | None = None) -> list[Detection]:
        """Release everything buffered for one run (or all runs of a trace)."""
        try:
            with self._lock:
                trace = self._traces.get(trace_id)
                if trace is None:
                    return []
                runs = [trace.runs[run_id]] if run_id is not None and run_id in trace.runs else (
                    [] if run_id is not None else list(trace.runs.values())
                )
                out: list[Detection] = []
                for run in runs:
                    out.extend(self._release(run, final=True))
                return out
        except Exception:
            self.stats.errors += 1
            _log.debug("otel-progress: flush failed", exc_info=True)
            return []

    def end_run(
        self,
        trace_id: str,
        run_id: str,
        *,
        span_id: str = "",
        parent_run_id: str | None = None,
    ) -> RunSummary | None:
        """An agent invocation finished: flush its calls, evaluate the run-scope signature
        if it was a sub-agent (``parent_run_id``: the run it was invoked from), free its
        state and summarise it."""
        try:
            with self._lock:
                trace = self._traces.get(trace_id)
                if trace is None:
                    return None
                run = trace.runs.get(run_id)
                detections: list[Detection] = []
                if run is not None:
                    detections.extend(self._release(run, final=True))
                if parent_run_id and self._run_signal is not None:
                    parent = trace.runs.get(parent_run_id)
                    det = self._run_scope(trace, parent, span_id or run_id)
                    if det is not None:
                        detections.append(det)
                if run is None:
                    return RunSummary(trace_id, run_id, None, 0, 0, len(detections), 0, None, 0, 0, 0,
                                      tuple(detections))
                if trace.evidence_run is run:
                    trace.detach()  # the trace's evidence outlives the run
                del trace.runs[run_id]
                self._run_count -= 1
                return RunSummary(
                    trace_id=trace_id,
                    run_id=run_id,
                    agent=run.agent,
                    turns=run.turn,
                    tokens=run.tokens,
                    detections=run.detections,
                    level=run.level,
                    first_detection_turn=run.first_detection_turn,
                    wasted_turns=run.wasted_turns,
                    wasted_tokens=run.wasted_tokens,
                    late_calls=run.late,
                    detections_list=tuple(detections),
                )
        except Exception:
            self.stats.errors += 1
            _log.debug("otel-progress: end_run failed", exc_info=True)
            return None

    def end_trace(self, trace_id: str) -> list[RunSummary]:
        """The trace is complete: end every run still open and free the trace."""
        with self._lock:
            trace = self._traces.get(trace_id)
            if trace is None:
                return []
            summaries = [s for r in list(trace.runs) if (s := self.end_run(trace_id, r)) is not None]
            self._drop_trace(trace_id)
            return summaries

    def rename_run(self, trace_id: str, run_id: str, new_run_id: str) -> bool:
        """Give a run another id within its trace (a run whose identity became known after
        its first calls: the service's provisional runs, see ``otel_progress.runs.traces``).
        False (nothing changed) when there is no such run or ``new_run_id`` is taken."""
        with self._lock:
            trace = self._traces.get(trace_id)
            if trace is None or run_id not in trace.runs or new_run_id in trace.runs:
                return False
            run = trace.runs.pop(run_id)
            run.run_id = new_run_id
            trace.runs[new_run_id] = run
            return True

    def evict_idle(self, now: float | None = None) -> int:
        """Drop traces idle for longer than ``run_ttl_seconds``; returns how many."""
        now = time.monotonic() if now is None else now
        limit = now - self.config.run_ttl_seconds
        dropped = 0
        with self._lock:
            while self._traces:
                trace_id, trace = next(iter(self._traces.items()))
                if trace.last_seen > limit:
                    break
                self._drop_trace(trace_id, evicted=True)
                dropped += 1
        return dropped

    def run_state(self, trace_id: str, run_id: str) -> RunState | None:
        """The live state of a run (for summaries and tests), or None."""
        trace = self._traces.get(trace_id)
        return None if trace is None else trace.runs.get(run_id)

    # -- internals --------------------------------------------------------------------

    def _release(self, run: RunState, final: bool) -> list[Detection]:
        """Evaluate the complete steps at the head of the run's buffer: all of them when
        ``final``, else while it holds more than ``reorder_window`` calls. The buffer is
        already in start order (``observe`` keeps it sorted)."""
        pending = run.pending
        limit = self.config.reorder_window
        out: list[Detection] = []
        while pending and (final or len(pending) > limit):
            head = pending[0]
            i = 1
            if len(pending) > 1:
                end = head.end_ns
                while i < len(pending) and pending[i].start_ns < end and pending[i].parent_id == head.parent_id:
                    end = max(end, pending[i].end_ns)
                    i += 1
            group = pending[:i]
            del pending[:i]
            out.extend(self._evaluate(run, group))
        return out

    def _release_before(self, run: RunState, time_ns: int) -> list[Detection]:
        """Evaluate the buffered calls of the run that started at or before ``time_ns`` (all
        of them when it is 0: unknown), as complete steps; later ones stay buffered."""
        pending = run.pending
        cut = len(pending)
        if time_ns:
            cut = 0
            while cut < len(pending) and pending[cut].start_ns <= time_ns:
                cut += 1
        if not cut:
            return []
        later = pending[cut:]
        del pending[cut:]
        out = self._release(run, final=True)
        pending.extend(later)
        return out

    def _evaluate(self, run: RunState, group: list[ToolCall]) -> list[Detection]:
        """Evaluate one complete step (its calls in start order); its detection, if any."""
        head = group[0]
        if head.start_ns > run.watermark_ns:
            run.watermark_ns = head.start_ns
        for call in group:
            if call.node:
                run.trace.plan_node = call.node
        self.stats.steps += 1
        before = run.detections
        try:
            det = self.pipeline.run_step(run, group)
        except Exception:  # a bug in a signal must not lose the rest of the run
            self.stats.errors += 1
            _log.debug("otel-progress: step evaluation failed", exc_info=True)
            det = None
        if det is not None:
            self.stats.detections += 1
            return [det]
        if run.detections > before:
            self.stats.suppressed += 1
        return []

    def _run_scope(self, trace: TraceState, parent: RunState | None, span_id: str) -> Detection | None:
        signal = self._run_signal
        assert signal is not None
        if trace.run_signature_state is None:
            trace.run_signature_state = signal.new_state()
        turn = parent.turn if parent is not None else 0
        step = Step(turn=turn, calls=(), facts=(), key=None, tool="", start_ns=0, end_ns=0,
                    span_id=span_id, tokens=trace.tokens)
        finding = signal.evaluate(step, trace.run_signature_state, trace)
        if finding is None:
            return None
        trace.detections += 1
        trace.run_signature_state = signal.new_state()
        if parent is not None and parent.first_detection_turn is None:
            # the invoking run was told: what it spends from here on is wasted, as after
            # a detection of its own
            parent.first_detection_turn = turn
            parent.first_detection_tokens = parent.tokens
        if trace.level >= Level.PARK:
            return None
        trace.level += 1
        level = Level(trace.level)
        attempts = parent.attempts if parent is not None else ()
        self.stats.detections += 1
        return Detection(
            reason=finding.reason,
            turn=turn,
            level=level,
            scope=Scope.RUN,
            trace_id=trace.trace_id,
            span_id=span_id,
            run_id=parent.run_id if parent is not None else "",
            agent=parent.agent if parent is not None else None,
            tool="",
            figures=finding.figures,
            nudge=nudge_text(finding, level, turn, None),
            handoff=handoff_note(finding, turn, attempts),
            tokens=trace.tokens,
        )
