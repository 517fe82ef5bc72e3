"""The pipeline that turns a run's tool calls into steps and detections (the run's state
is :class:`~otel_progress.engine.runstate.RunState`).

Calls wait in a small reorder buffer (ordered by start time) until their step is known
to be complete; parallel calls from one model response (same parent span, overlapping in
time) become one step. Each step's digests are computed once, then the signals run in
order, cheap first, stopping at the first finding. A finding becomes a detection with an
escalation level; every signal then forgets the evidence of that loop, so the next
detection (the next level) must rest on new evidence. An ongoing loop is therefore not
re-announced each turn, and nothing is announced past level 3.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..evidence.canonical import Digester, normalise_action
from ..model import Compaction, Detection, Finding, Level, Scope, ToolCall
from .config import Config
from .digests import MASK, admit
from .escalation import handoff_note, nudge_text
from .facts import FactBuilder
from .modelside import ModelSide
from .runstate import RunState
from .signals import Signal
from .signals.model_base import ModelSignal
from .step import Step

__all__ = ["Pipeline"]

_MAX_ATTEMPTS = 5
_FULL, _ARGUMENTS, _NAMES = "full", "arguments", "names"  # ToolCall.evidence_level


def _weakest_level(calls: Sequence[ToolCall]) -> str | None:
    """The weakest evidence level among a step's calls, or None when all are ``full``
    (a detection then carries no ``progress.evidence_level``)."""
    levels = {_ARGUMENTS if c.result_truncated and c.evidence_level == _FULL else c.evidence_level
              for c in calls}
    if levels == {_FULL} or not levels:  # (none: a compaction's detection, see Pipeline.compaction)
        return None
    if _NAMES in levels:
        return _NAMES
    if _ARGUMENTS in levels:
        return _ARGUMENTS
    return next(iter(levels - {_FULL}))


def _signature_text(parts: tuple[str, ...], actions: list[int]) -> str:
    """The text a state signature digests: goal, plan node, the action digests (sorted,
    for a batch of calls), the evidence part, the open obligations and ``blocked_on``."""
    goal, node, evidence_part, obligations, blocked_on = parts
    joined = str(actions[0]) if len(actions) == 1 else ",".join(str(a) for a in sorted(actions))
    return "\x1f".join((goal, node, joined, evidence_part, obligations, blocked_on))


def _signature_parts(run: RunState, call: ToolCall) -> tuple[str, str, str, str, str]:
    """The parts of a step's state signature other than its actions, from the step's
    (first) call: goal, plan node, evidence (published, else the run's evidence version,
    noting in ``run`` whether it changed since the last signature), obligations, blocker."""
    evidence = call.evidence
    if evidence is not None:
        evidence_part = "e:" + ",".join(sorted(evidence))
        run.derived_evidence_changed = False
    else:
        version = run.evidence_version
        evidence_part = f"v:{version}"
        run.derived_evidence_changed = version != run.sig_evidence_version
        run.sig_evidence_version = version
    obligations = ",".join(sorted(call.obligations)) if call.obligations else ""
    return (call.goal or "", call.node or "", evidence_part, obligations, call.blocked_on or "")


class Pipeline:
    """The signals in order plus the step construction and escalation they share."""

    def __init__(self, config: Config, signals: Sequence[Signal], digester: Digester,
                 model_signals: Sequence[ModelSignal] = ()) -> None:
        self.config = config
        self.signals = tuple(signals)
        #: the model-side signals and the steps they evaluate (modelside.py)
        self.model_side = ModelSide(model_signals, digester, self.escalate)
        self.model_signals = self.model_side.signals
        self.digester = digester
        self._want_action = any(s.name in ("signature",) for s in self.signals)
        self._write_tools = frozenset(n for n, s in config.manifest.items() if s.kind == "write")
        self.fact_builder = FactBuilder(config, digester, self._want_action)
        # The facts of one call (FactBuilder.facts), bound once: called per call.
        self.facts = self.fact_builder.facts
        # The signals' evaluate methods, bound once (run_step calls each of them per step).
        self._evaluators = tuple(s.evaluate for s in self.signals)
        self._epoch_signals = tuple(i for i, s in enumerate(self.signals) if s.uses_epochs)
        self._boundary_signals = tuple(i for i, s in enumerate(self.signals) if s.uses_boundaries)

    # -- steps ------------------------------------------------------------------------

    def _single_step(self, run: RunState, call: ToolCall) -> Step:
        """The next step of ``run`` when it is one call (the common case), with the run's
        per-step facts set: :meth:`make_step` and :meth:`_step_facts` in one pass, their
        general forms reduced to this call's own key, name, times, span and published
        attributes."""
        f = self.facts(call, run)
        run.turn = turn = run.turn + 1
        name = call.name
        wrote = name in self._write_tools and not call.error
        step = Step(turn, (call,), (f,), f.key, name, call.start_ns, call.end_ns, call.span_id, run.tokens,
                    0, False, wrote, world=f.world, partial=f.partial)
        plan_step = call.plan_step
        if plan_step is None:
            run.plan_advanced = False
        else:
            run.plan_advanced = plan_step != run.last_plan_step
            run.last_plan_step = plan_step
        goal_distance = call.goal_distance
        if goal_distance is None:
            run.goal_improved = False
        else:
            best = run.best_goal
            run.goal_improved = best is not None and goal_distance < best
            if best is None or goal_distance < best:
                run.best_goal = goal_distance
        state = call.state
        run.step_state = state
        if state is not None:
            if wrote and state == run.last_state:
                step.wrote = False  # see _step_facts
            run.last_state = state
        run.step_measure = call.measure
        node = call.node
        run.step_node = node
        action = f.action
        if action is not None and self._want_action:
            step.signature_parts = parts = _signature_parts(run, call)
            run.step_signature = hash(_signature_text(parts, [action])) & MASK  # see _step_facts
        else:
            run.step_signature = None
        result = f.result
        if result is not None and not f.empty and not f.incidental:
            cap = self.config.max_evidence
            evidence_array = run.evidence
            if run.trace.evidence_run is not run or len(evidence_array) >= cap:
                run.trace.admit_from(run, result)
            if admit(evidence_array, result, cap):
                run.evidence_version += 1
                step.new_evidence = 1
        run.attempts.note(f.call, bool(call.error), name, f.args, _MAX_ATTEMPTS)
        return step

    def make_step(self, run: RunState, calls: list[ToolCall]) -> Step:
        """Build the next step of ``run`` from a complete group of parallel calls (a
        step of one call is built by :meth:`_single_step`)."""
        facts = tuple(self.facts(c, run) for c in calls)
        if any(f.key is None for f in facts):
            key = None
        else:
            key = self.digester.text(",".join(str(k) for k in sorted(f.key for f in facts)))  # type: ignore[type-var]
        last = max(calls, key=lambda c: c.end_ns)
        run.turn += 1
        return Step(
            turn=run.turn,
            calls=tuple(calls),
            facts=facts,
            key=key,
            tool="+".join(sorted({f.tool for f in facts})),
            start_ns=min(c.start_ns for c in calls),
            end_ns=last.end_ns,
            span_id=last.span_id,
            tokens=run.tokens,
            wrote=any(c.name in self._write_tools and not c.error for c in calls),
            world=any(f.world for f in facts),
            partial=any(f.partial for f in facts),
        )

    def _step_facts(self, run: RunState, step: Step) -> None:
        """Set the run's per-step facts (published attributes, evidence, signature) for a
        step of parallel calls."""
        calls = step.calls
        first = calls[0]
        plan_step = next((c.plan_step for c in reversed(calls) if c.plan_step is not None), None)
        goal_distance = next((c.goal_distance for c in calls if c.goal_distance is not None), None)
        state = next((c.state for c in reversed(calls) if c.state is not None), None)
        measure = next((c.measure for c in calls if c.measure is not None), None)
        run.plan_advanced = plan_step is not None and plan_step != run.last_plan_step
        if plan_step is not None:
            run.last_plan_step = plan_step
        run.goal_improved = False
        if goal_distance is not None:
            run.goal_improved = run.best_goal is not None and goal_distance < run.best_goal
            if run.best_goal is None or goal_distance < run.best_goal:
                run.best_goal = goal_distance
        run.step_state = state
        if state is not None:
            # A write is progress only if it changed the state, where a state is published.
            if step.wrote and state == run.last_state:
                step.wrote = False
            run.last_state = state
        run.step_measure = measure
        run.step_node = first.node
        # The signature is taken before the step's own results are admitted.
        run.step_signature = None
        facts = step.facts
        if self._want_action and all(f.action is not None for f in facts):
            step.signature_parts = parts = _signature_parts(run, first)
            # Process-local, like the action digests it is made of: equal when (and, but
            # for a 2**-63 collision, only when) the exported signature is, which digests
            # the same text with BLAKE3 action digests (exported_signature).
            run.step_signature = hash(_signature_text(parts, [f.action for f in facts])) & MASK  # type: ignore[misc]
        cap = self.config.max_evidence
        trace = run.trace
        attempts = run.attempts
        for i, f in enumerate(facts):
            # Admit the result as evidence, to the trace and to the run (the trace first:
            # while it shares the run's evidence, it must see it as it was).
            result = f.result
            if result is not None and not f.empty and not f.incidental:
                if trace.evidence_run is not run or len(run.evidence) >= cap:
                    trace.admit_from(run, result)  # (else it shares the run's evidence: nothing to do)
                if admit(run.evidence, result, cap):
                    run.evidence_version += 1
                    step.new_evidence += 1
            # Remember the attempt for the handoff note.
            attempts.note(f.call, bool(calls[i].error), f.tool, f.args, _MAX_ATTEMPTS)

    def exported_signature(self, step: Step) -> int:
        """The state signature of ``step`` as exported with a detection: a keyed BLAKE3
        digest of the signature text with the keyed BLAKE3 digests of the normalised
        actions, stable across processes. Computed only when a detection reports it; the
        per-step comparisons use the process-local ``run.step_signature``."""
        assert step.signature_parts is not None
        d = self.digester
        identity = self.fact_builder.texts.identity
        actions = [d.digest(normalise_action(f.tool, identity(f.tool, f.args))) for f in step.facts]
        return d.text(_signature_text(step.signature_parts, actions))

    def run_step(self, run: RunState, calls: list[ToolCall]) -> Detection | None:
        """Evaluate one complete group of calls; return the detection to announce, if any."""
        if len(calls) == 1:
            step = self._single_step(run, calls[0])
        else:
            step = self.make_step(run, calls)
            self._step_facts(run, step)
        model = run.model
        if model is not None:
            self.model_side.note_executed(model, step)
        finding = None
        for evaluate, state in zip(self._evaluators, run.states, strict=True):
            finding = evaluate(step, state, run)
            if finding is not None:
                break
        # the epoch, after the signals (they judge a step by the epoch before it)
        if step.wrote or (step.world and run.step_state is None):
            run.epoch_world = True
        if step.new_evidence:
            run.epoch_evidence = True
        if run.epoch_world and run.epoch_evidence:
            run.epoch_world = run.epoch_evidence = False
            for i in self._epoch_signals:
                run.states[i] = self.signals[i].epoch_ended(run.states[i])
        detection = None if finding is None else self.escalate(run, step, finding)
        if step.new_evidence or step.wrote or step.world or run.plan_advanced or run.goal_improved:
            run.input_at_progress = run.input_tokens  # (the wasted stretch starts after this step)
            if model is not None:
                model.progress += 1  # news for the model side (engine/modelside.py)
        return detection

    def compaction(self, run: RunState, compaction: Compaction) -> Detection | None:
        """The run's context was compacted after its steps so far (signals/compaction.py);
        the detection to announce, if any (on the compaction's record or span)."""
        finding = None
        for i in self._boundary_signals:
            found = self.signals[i].boundary(run.states[i], run, compaction)
            finding = finding or found
        if finding is None:
            return None
        at = compaction.time_ns
        step = Step(run.turn, (), (), None, "", at, at, compaction.span_id, run.tokens)
        return self.escalate(run, step, finding)

    def escalate(self, run: RunState, step: Step, finding: Finding) -> Detection | None:
        """Turn a finding into a detection with its level, and reset the signals."""
        run.detections += 1
        if run.first_detection_turn is None:
            run.first_detection_turn = step.turn
            run.first_detection_tokens = step.tokens
            run.first_waste_input = run.input_at_progress
        for i, signal in enumerate(self.signals):
            run.states[i] = signal.reset(run.states[i])
        if run.model is not None:
            self.model_side.reset(run.model)
        if run.level >= Level.PARK:
            return None  # parked: counted, not announced again
        # Levels 2 (restart) and 3 (park) stop or reset a run: they rest on the same loop
        # going on after the nudge: the same reason and, where the signal knows it, the same
        # thing repeating, or any reason with nothing new admitted since the last detection.
        # Another loop, after the run learned something, is nudged afresh.
        loop = (finding.reason.value, finding.loop)
        same = loop == run.loop or run.evidence_version == run.loop_evidence
        run.level = run.level + 1 if same and run.level else 1
        run.loop, run.loop_evidence = loop, run.evidence_version
        level = Level(run.level)
        figures = finding.figures
        evidence_level = _weakest_level(step.calls)
        if evidence_level is not None:
            figures = {**figures, "evidence_level": evidence_level}
        if run.input_tokens:
            # the context the model read again on each step since the run last made progress
            figures = {**figures, "wasted_input_tokens": run.input_tokens - run.input_at_progress}
        return Detection(
            reason=finding.reason,
            turn=step.turn,
            level=level,
            scope=Scope.AGENT,
            trace_id=run.trace.trace_id,
            span_id=step.span_id,
            run_id=run.run_id,
            agent=run.agent,
            tool=step.tool,
            figures=figures,
            nudge=nudge_text(finding, level, step.turn, run.first_detection_turn),
            handoff=handoff_note(finding, step.turn, run.attempts),
            tokens=step.tokens,
        )
