"""The engine's tables: the traces it tracks and their runs (:class:`RunTable`), and one
trace's runs with the run-scope (cross-agent) state (:class:`TraceState`).

State is bounded: at most ``max_runs`` runs are kept (least recently used traces are
evicted first) and idle traces are dropped after ``run_ttl_seconds`` by
:meth:`RunTable.evict_idle`. The tables are not thread-safe: the engine holds its lock.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from typing import Any

from ..model import Detection, Level, Scope
from .digests import admit
from .escalation import handoff_note, nudge_text
from .pipeline import Pipeline
from .runstate import RunState
from .signals import Signal
from .step import Step
from .summary import EngineStats

__all__ = ["RunTable", "TraceState"]


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

    def run_scope(self, signal: Signal, parent: RunState | None, span_id: str) -> Detection | None:
        """A sub-agent invoked from ``parent`` (None: unknown) ended: evaluate the run-scope
        signature ``signal`` over the trace; the detection to announce, if any (at the
        trace's own level: counted, not announced, past level 3)."""
        if self.run_signature_state is None:
            self.run_signature_state = signal.new_state()
        turn = parent.turn if parent is not None else 0
        step = Step(turn=turn, calls=(), facts=(), key=None, tool="", start_ns=0, end_ns=0,
                    span_id=span_id, tokens=self.tokens)
        finding = signal.evaluate(step, self.run_signature_state, self)
        if finding is None:
            return None
        self.detections += 1
        self.run_signature_state = signal.new_state()
        if parent is not None and parent.first_detection_turn is None:
            # the invoking run was told: what it spends from here on is wasted, as after
            # a detection of its own
            parent.first_detection_turn = turn
            parent.first_detection_tokens = parent.tokens
            parent.first_waste_input = parent.input_at_progress
        if self.level >= Level.PARK:
            return None
        self.level += 1
        level = Level(self.level)
        attempts = parent.attempts if parent is not None else ()
        return Detection(
            reason=finding.reason,
            turn=turn,
            level=level,
            scope=Scope.RUN,
            trace_id=self.trace_id,
            span_id=span_id,
            run_id=parent.run_id if parent is not None else "",
            agent=parent.agent if parent is not None else None,
            tool="",
            figures=finding.figures,
            nudge=nudge_text(finding, level, turn, None),
            handoff=handoff_note(finding, turn, attempts),
            tokens=self.tokens,
        )


class RunTable:
    """The traces the engine tracks, least recently used first, and their runs."""

    def __init__(self, pipeline: Pipeline, stats: EngineStats) -> None:
        self.pipeline = pipeline
        self.config = pipeline.config
        self.stats = stats
        self.traces: OrderedDict[str, TraceState] = OrderedDict()
        self.run_count = 0  # runs in all traces

    def trace(self, trace_id: str, now: float) -> TraceState:
        """The trace (made when new), marked as used ``now``."""
        trace = self.traces.get(trace_id)
        if trace is None:
            trace = self.traces[trace_id] = TraceState(trace_id, self.pipeline, now)
        else:
            self.traces.move_to_end(trace_id)
            trace.last_seen = now
        return trace

    def run(self, trace: TraceState, run_id: str, agent: str | None) -> RunState:
        """The run of ``trace`` (made when new, evicting the least recently used traces past
        ``max_runs``), with its agent name once known."""
        run = trace.runs.get(run_id)
        if run is None:
            run = trace.runs[run_id] = RunState(self.pipeline, trace, run_id, agent)
            self.run_count += 1
            self._enforce_cap(keep=trace.trace_id)
        elif agent and not run.agent:
            run.agent = agent
        return run

    def _enforce_cap(self, keep: str) -> None:
        while self.run_count > self.config.max_runs and len(self.traces) > 1:
            trace_id, _trace = next(iter(self.traces.items()))
            if trace_id == keep:
                self.traces.move_to_end(trace_id)
                continue
            self.drop_trace(trace_id, evicted=True)

    def adopt(self, trace: TraceState, last_seen: float) -> None:
        """Hold ``trace`` (state written by another engine and read back) in place of what
        is held of its id, as used at ``last_seen``, bound to this table's pipeline."""
        self.drop_trace(trace.trace_id)
        trace.pipeline = self.pipeline
        for run in trace.runs.values():
            run.pipeline = self.pipeline
            run.trace = trace
        trace.last_seen = last_seen
        self.traces[trace.trace_id] = trace
        self.run_count += len(trace.runs)
        self._enforce_cap(keep=trace.trace_id)

    def drop_trace(self, trace_id: str, evicted: bool = False) -> TraceState | None:
        """Forget a trace and its runs (``evicted``: counted in the stats as evicted)."""
        trace = self.traces.pop(trace_id, None)
        if trace is None:
            return None
        self.run_count -= len(trace.runs)
        if evicted:
            self.stats.traces_evicted += 1
            self.stats.runs_evicted += len(trace.runs)
        return trace

    def drop_run(self, trace: TraceState, run_id: str) -> None:
        """Forget a run of ``trace`` that ended (the trace keeps the evidence it shares
        with it)."""
        run = trace.runs.pop(run_id)
        if trace.evidence_run is run:
            trace.detach()  # the trace's evidence outlives the run
        self.run_count -= 1

    def rename_run(self, trace_id: str, run_id: str, new_run_id: str) -> bool:
        """See :meth:`ProgressEngine.rename_run <otel_progress.engine.ProgressEngine.rename_run>`."""
        trace = self.traces.get(trace_id)
        if trace is None or run_id not in trace.runs or new_run_id in trace.runs:
            return False
        run = trace.runs.pop(run_id)
        run.run_id = new_run_id
        trace.runs[new_run_id] = run
        return True

    def evict_idle(self, now: float) -> int:
        """Drop the traces last used before ``now - run_ttl_seconds``; returns how many."""
        limit = now - self.config.run_ttl_seconds
        dropped = 0
        while self.traces:
            trace_id, trace = next(iter(self.traces.items()))
            if trace.last_seen > limit:
                break
            self.drop_trace(trace_id, evicted=True)
            dropped += 1
        return dropped
