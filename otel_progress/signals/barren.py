"""The no-progress counter (seed 000): consecutive steps that put nothing new in the run."""

from __future__ import annotations

from typing import Any

from ..model import Finding, Reason
from ..views import Sketch, only_repeats
from .base import Signal, Step

__all__ = ["BarrenSignal"]

_RECENT = 8  # the plain-text answers an interrupting answer is compared with


class _State:
    __slots__ = ("barren", "recent")

    def __init__(self) -> None:
        self.barren = 0
        # the run's last plain-text answers (references), sketched when first compared
        self.recent: list[str | Sketch] = []


class BarrenSignal(Signal):
    """The no-progress counter. A step is progress when it admits a result the run has
    not seen before (an empty result never counts), when a tool declared ``write``
    succeeded (and, where the step publishes a state digest, the state changed), when a
    bare acknowledgement (``ok``, ``Successfully modified …``) answers a request that
    differs from that tool's previous one (an undeclared write), when the plan advanced or
    when the goal distance improved. Other steps are barren; ``barren_threshold`` in a row
    fire. A step whose result is only a size or a truncated preview (evidence level
    ``arguments``) is progress when it differs from every one seen, and otherwise neutral:
    an equal size or preview does not prove that nothing new came back. Comparing with
    everything the run has seen, not only the tool's previous result,
    also catches paging that wraps around to pages already read. Exempt wait polls are
    neither; steps without captured content are judged only by the published facts.

    A command (a call whose arguments carry a command: a shell or terminal tool) that
    succeeds silently is an undeclared write when the run has not sent that command
    before: ``mkdir -p out``, ``chmod +x run.sh``, ``tmux send-keys … Enter`` print
    nothing because they changed the world, not because nothing was found. The same
    command again, silent again, is not progress. A result that says nothing was found
    (``0 results``) is never progress, command or not. Any other request that differs
    from its tool's previous one and is answered with silence (a ``think`` note, a reply
    with no body) is neutral: neither progress nor a barren step.

    A streak is not broken by an answer that only looks new (issue 15): a step whose only
    progress is a plain-text answer saying nothing the run's last eight plain-text
    answers did not (``views.only_repeats``: a lookup that returns a sentence already
    read, prefixed; a page transcribed again elsewhere) is neutral while a streak is
    running. Anything else new (a write, a changed state, a plan or goal advance, a new
    JSON record, a text with new content) ends it."""

    name = "barren"

    def new_state(self) -> _State:
        return _State()

    def reset(self, state: Any) -> Any:
        state.barren = 0
        return state

    @staticmethod
    def _remember(state: _State, texts: list[str] | list[Sketch]) -> None:
        if texts:
            recent = state.recent
            recent.extend(texts)
            if len(recent) > _RECENT:
                del recent[:-_RECENT]

    @staticmethod
    def _only_looks_new(step: Step, texts: list[str], state: _State, run: Any) -> list[Sketch] | None:
        """The sketches of the step's answers when its progress is only plain-text answers
        that repeat the run's recent ones (computed only while a streak runs), else None."""
        if step.wrote or run.plan_advanced or run.goal_improved or step.world:
            return None
        if any(f.result is not None and (type(f.parsed_result) is not str or f.place is not None)
               and f.error is None for f in step.facts):
            return None  # (a JSON record is not prose; a view was judged at its location already)
        recent = state.recent
        if not recent:
            return None
        for i, old in enumerate(recent):
            if type(old) is str:
                recent[i] = Sketch(old)
        sketches = [Sketch(t) for t in texts]
        if all(only_repeats(sk, recent) for sk in sketches):  # type: ignore[arg-type]
            return sketches
        return None

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        if step.exempt:
            return None
        progress = step.wrote or step.new_evidence > 0 or run.plan_advanced or run.goal_improved
        comparable = progress
        neutral = True
        for facts in step.facts:
            if facts.result is None:
                continue
            comparable = True
            if facts.world and run.step_state is None:
                progress = True  # a published state that did not change outranks it
            if not (facts.silent and facts.error is None and not facts.command and not facts.repeat):
                neutral = False
        texts = [f.parsed_result for f in step.facts if type(f.parsed_result) is str and f.error is None]
        if progress:
            if state.barren and texts:
                repeated = self._only_looks_new(step, texts, state, run)
                if repeated is not None:
                    self._remember(state, repeated)
                    return None  # neutral: the streak goes on
            state.barren = 0
            self._remember(state, texts)
            return None
        if step.partial:
            return None  # an equal size or truncated preview does not prove nothing new
        if not comparable or neutral:
            return None  # (a new request answered with silence: a note to self, a 204)
        self._remember(state, texts)
        state.barren += 1
        if state.barren < self.config.barren_threshold:
            return None
        return Finding(
            Reason.BARREN,
            {"barren_steps": state.barren},
            f"{state.barren} steps in a row brought nothing new (results already seen or empty,"
            " no write, no plan or goal progress)",
        )
