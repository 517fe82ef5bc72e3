"""The engine's public API, the one the adapters call (:class:`ProgressEngine`; the traces
and runs it tracks are in :mod:`.tables`, a step's evaluation in :mod:`.pipeline`, its
reports in :mod:`.summary`).

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
from collections.abc import Iterable, Mapping
from operator import attrgetter
from typing import Any

from ..evidence.canonical import Digester
from ..model import Compaction, Detection, ModelOutput, ToolCall
from .config import Config
from .pipeline import Pipeline
from .release import StepRelease
from .runstate import RunState
from .scopes import CrossTraceScopes
from .signals import RunSignatureSignal, build_model_signals, build_signals
from .snapshot import StateCodec
from .summary import EngineStats, RunSummary, summarise
from .tables import RunTable, TraceState

__all__ = ["EngineStats", "ProgressEngine", "RunSummary"]

_log = logging.getLogger(__name__)

#: The order calls are evaluated in: start time, then end time, then span id.
_start_order = attrgetter("start_ns", "end_ns", "span_id")


class ProgressEngine:
    """Detects runs that stopped making progress, from their tool calls.

    Args:
        config: thresholds, manifest and digest key; defaults to :class:`Config` read
            from the environment (``Config.from_env()``).
    """

    def __init__(self, config: Config | None = None) -> None:
        self.config = config if config is not None else Config.from_env()
        self.digester = Digester(self.config.digest_key, self.config.volatile_keys)
        self.pipeline = Pipeline(self.config, build_signals(self.config), self.digester,
                                 build_model_signals(self.config, self.digester))
        self._run_signal = (
            RunSignatureSignal(self.config) if self.config.enabled("run_signature") else None
        )
        self._lock = threading.RLock()
        self.stats = EngineStats()
        self._table = RunTable(self.pipeline, self.stats)
        steps = StepRelease(self.config, self.pipeline, self.stats)
        self._release, self._release_before, self._evaluate = steps.release, steps.release_before, steps.evaluate
        # What the engine follows across traces: conversations, the tool side's and the model's.
        self._scopes = CrossTraceScopes(self.config, self.pipeline)

    # -- state ------------------------------------------------------------------------

    @property
    def active_runs(self) -> int:
        """Runs currently tracked."""
        return self._table.run_count

    @property
    def active_traces(self) -> int:
        """Traces currently tracked."""
        return len(self._table.traces)

    # -- input ------------------------------------------------------------------------

    def observe(self, call: ToolCall, *, flush: bool = False, now: float | None = None) -> list[Detection]:
        """Add one tool call to its run; return the detections of the steps it completes.

        With ``flush=True`` everything buffered for the run is released (the caller
        knows no other call of the run is in flight).
        """
        if not call.executed:
            # A call that never ran (denied, awaiting approval): not a step, neither a repeat
            # nor a failure of the tool; a refused request of the model (signals/unexecuted.py).
            return self._refused(call, now)
        try:
            with self._lock:
                self.stats.calls += 1
                run = self._open_run(call.trace_id, call.run_id, call.agent, call.span_id, now)
                if run is None:
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

    def observe_model(self, output: ModelOutput, *, now: float | None = None) -> list[Detection]:
        """One model call of a run answered (its text, reasoning and the tool calls it
        requested, :class:`~otel_progress.model.ModelOutput`); the detections of the
        model-side signals (``text_repeat``, ``unexecuted_repeat``).

        The calls buffered for the run that started before the model call are evaluated
        first (as compaction does): they are what the model read. A detection is reported
        on the output's span at the run's current turn (its tool steps so far: a model
        output is not a step). An output reported twice (the same ``span_id``) counts once;
        one with no content (nothing captured, no prompt) is ignored, and a run that never
        reports one keeps no model-side state."""
        if not self.pipeline.model_signals:
            return []
        try:
            if not output.captured and output.prompt is None:
                return []
            with self._lock:
                run = self._open_run(output.trace_id, output.run_id, output.agent, output.span_id, now, skip_empty=True)
                if run is None:
                    return []
                out = self._release_before(run, output.start_ns)
                before = run.detections
                det = self.pipeline.model_side.output(run, output)
                if det is not None:
                    self.stats.detections += 1
                    out.append(det)
                elif run.detections > before:
                    self.stats.suppressed += 1  # parked: counted, not announced again
                return out
        except Exception:  # never raise into the caller
            self.stats.errors += 1
            _log.debug("otel-progress: observe_model failed", exc_info=True)
            return []

    def _refused(self, call: ToolCall, now: float | None) -> list[Detection]:
        """A tool call that never ran: an unexecuted request of the model
        (``ModelSide.refused``, engine/modelside.py), when that signal is enabled."""
        if not any(s.name == "unexecuted" for s in self.pipeline.model_signals):
            return []
        try:
            with self._lock:
                run = self._open_run(call.trace_id, call.run_id, call.agent, call.span_id, now, skip_empty=True)
                if run is None:
                    return []
                before = run.detections
                det = self.pipeline.model_side.refused(run, call)
                if det is None:
                    if run.detections > before:
                        self.stats.suppressed += 1
                    return []
                self.stats.detections += 1
                return [det]
        except Exception:  # never raise into the caller
            self.stats.errors += 1
            _log.debug("otel-progress: refused call failed", exc_info=True)
            return []

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
                run = self._open_run(compaction.trace_id, compaction.run_id, compaction.agent, compaction.span_id,
                                     now, skip_empty=True)
                if run is None:
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

    def record_tokens(self, trace_id: str, run_id: str, tokens: int, *, input_tokens: int = 0,
                      now: float | None = None) -> None:
        """Add tokens a run's model calls consumed (from ``gen_ai.usage.*``), of which
        ``input_tokens`` were their input (the context each call read: what a wasted step
        costs besides its own output, reported as ``wasted_input_tokens``)."""
        try:
            tokens, input_tokens = max(0, int(tokens)), max(0, int(input_tokens))
        except (TypeError, ValueError, OverflowError):
            return
        if tokens <= 0 and input_tokens <= 0:
            return
        with self._lock:
            trace = self._table.trace(trace_id, time.monotonic() if now is None else now)
            run = self._table.run(trace, run_id, None)
            run.tokens += tokens
            run.input_tokens += input_tokens
            trace.tokens += tokens

    def set_plan_node(self, trace_id: str, node: str | None) -> None:
        """Record the trace's current plan node (for the run-scope signature)."""
        with self._lock:
            trace = self._table.traces.get(trace_id)
            if trace is not None and node:
                trace.plan_node = node

    def flush(self, trace_id: str, run_id: str | None = None) -> list[Detection]:
        """Release everything buffered for one run (or all runs of a trace)."""
        try:
            with self._lock:
                trace = self._table.traces.get(trace_id)
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
        conversation_id: str | None = None,
        now: float | None = None,
    ) -> RunSummary | None:
        """An agent invocation finished: flush its calls, evaluate the run-scope signature
        if it was a sub-agent (``parent_run_id``: the run it was invoked from), free its
        state and summarise it.

        ``conversation_id``: the conversation the run is a turn of (``gen_ai.conversation.id``
        or ``session.id`` on its agent span). A top-level run that names one is compared with
        the conversation's earlier turns (:mod:`.conversations`); a sub-agent's requests and
        answers count as its invoking run's."""
        try:
            with self._lock:
                trace = self._table.traces.get(trace_id)
                if trace is None:
                    return None
                run = trace.runs.get(run_id)
                detections: list[Detection] = []
                if run is not None:
                    detections.extend(self._release(run, final=True))
                if parent_run_id and self._run_signal is not None:
                    det = trace.run_scope(self._run_signal, trace.runs.get(parent_run_id), span_id or run_id)
                    if det is not None:
                        self.stats.detections += 1
                        detections.append(det)
                across = self._scopes.run_ended(trace, trace_id, run_id, run, parent_run_id, conversation_id,
                                                span_id or run_id, time.monotonic() if now is None else now)
                self.stats.detections += len(across)
                detections.extend(across)
                if run is not None:
                    self._table.drop_run(trace, run_id)
                return summarise(trace_id, run_id, run, detections)
        except Exception:
            self.stats.errors += 1
            _log.debug("otel-progress: end_run failed", exc_info=True)
            return None

    def end_trace(self, trace_id: str) -> list[RunSummary]:
        """The trace is complete: end every run still open and free the trace."""
        with self._lock:
            trace = self._table.traces.get(trace_id)
            if trace is None:
                return []
            summaries = [s for r in list(trace.runs) if (s := self.end_run(trace_id, r)) is not None]
            self._table.drop_trace(trace_id)
            return summaries

    def discard_trace(self, trace_id: str) -> bool:
        """Forget a trace and its runs without ending them: no summary, no detection, and no
        turn of a conversation (its analysis starts over: ``serve`` analysing a trace again
        whole, a trace's state replaced by another process's). Whether it was known."""
        with self._lock:
            return self._table.drop_trace(trace_id) is not None

    def rename_run(self, trace_id: str, run_id: str, new_run_id: str) -> bool:
        """Give a run another id within its trace (a run whose identity became known after
        its first calls: the service's provisional runs, see ``otel_progress.runs.provisional``).
        False (nothing changed) when there is no such run or ``new_run_id`` is taken."""
        with self._lock:
            return self._table.rename_run(trace_id, run_id, new_run_id)

    def evict_idle(self, now: float | None = None) -> int:
        """Drop traces idle for longer than ``run_ttl_seconds``; returns how many."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._scopes.evict_idle(now)
            return self._table.evict_idle(now)

    def trace_state(self, trace_id: str) -> TraceState | None:
        """The live state of a trace and its runs (to write it out: :meth:`state_codec`),
        or None. Read it under the caller's own serialisation of the engine's input."""
        return self._table.traces.get(trace_id)

    def adopt_trace(self, state: TraceState, idle: float = 0.0, now: float | None = None) -> None:
        """Continue a trace from state another process (or an earlier one) wrote
        (:meth:`state_codec`): it replaces what this engine holds of the trace, and is
        taken as last used ``idle`` seconds ago."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._table.adopt(state, now - max(0.0, idle))

    def conversation_state(self, now: float | None = None, conversations: Iterable[str] | None = None
                           ) -> dict[str, Any]:
        """What the engine remembers of its conversations across traces (the conversation
        scope's turns, the model side's; of the ``conversations`` ids only, when given), to
        write out with :meth:`state_codec` (times as ages) and continue in another process
        (:meth:`adopt_conversations`); empty when both are off."""
        now = time.monotonic() if now is None else now
        with self._lock:
            return self._scopes.snapshot(now, conversations)

    def adopt_conversations(self, state: Mapping[str, Any], idle: float = 0.0, now: float | None = None,
                            replace: bool = False) -> int:
        """Continue the conversations of :meth:`conversation_state` written by another
        process (or an earlier one), ``idle`` seconds after it was written; those this
        engine already follows are kept, or with ``replace`` replaced (the state is newer:
        another process continued them since). Returns how many were continued."""
        now = (time.monotonic() if now is None else now) - max(0.0, idle)
        with self._lock:
            return self._scopes.restore(state, now, replace)

    def state_codec(self) -> StateCodec:
        """The codec that writes and reads this engine's trace states (:mod:`.snapshot`):
        bytes meaningful only to an engine with the same hash seed, digest key and version."""
        extra = {"run_signal": self._run_signal} if self._run_signal is not None else None
        return StateCodec.for_pipeline(self.pipeline, extra)

    def run_state(self, trace_id: str, run_id: str) -> RunState | None:
        """The live state of a run (for summaries and tests), or None."""
        trace = self._table.traces.get(trace_id)
        return None if trace is None else trace.runs.get(run_id)

    # -- internals --------------------------------------------------------------------

    def _open_run(self, trace_id: str, run_id: str, agent: str | None, span_id: str, now: float | None,
                  skip_empty: bool = False) -> RunState | None:
        """The run an observation belongs to (made, or named by its agent, on first sight),
        its trace marked used at ``now``; None when the span was seen recently (a
        redelivery, counted). ``skip_empty``: an empty span id is not remembered."""
        trace = self._table.trace(trace_id, time.monotonic() if now is None else now)
        run = trace.runs.get(run_id)
        if run is None or (agent and not run.agent):
            run = self._table.run(trace, run_id, agent)
        if (span_id or not skip_empty) and not run.remember(span_id):
            run.duplicates += 1
            self.stats.duplicates += 1
            return None
        return run
