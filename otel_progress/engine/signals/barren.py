"""The no-progress counter (seed 000): consecutive steps that put nothing new in the run."""

from __future__ import annotations

from typing import Any

from ...evidence.views import Sketch, only_repeats
from ...model import Finding, Reason
from ..step import Step
from .base import Signal

__all__ = ["BarrenSignal"]

_RECENT = 8  # the plain-text answers an interrupting answer is compared with


class _State:
    __slots__ = ("barren", "held", "recent", "sketches")

    def __init__(self) -> None:
        self.barren = 0
        # the run's last plain-text answers (references), and the sketches of recent texts
        # (both made when first needed: most runs of JSON results never need them)
        self.recent: list[str] | tuple[()] = ()
        self.sketches: dict[str, Sketch] | None = None
        # an answer that ended a streak and may only look new: (the streak it ended, its
        # texts, the recent answers before it), judged if the next judged step is barren
        self.held: tuple[int, list[str], list[str]] | None = None


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
    progress is plain text saying nothing the run's last eight plain-text answers did not
    (``views.only_repeats``: a lookup that returns, prefixed, a sentence already read) is
    neutral, neither progress nor barren. It is judged when the streak resumes right after
    it (then the row goes on from where it was), so that the judgement costs nothing while
    a run makes progress. Anything else new (a write, a changed state, a plan or goal
    advance, a new JSON record, a view, a text with new content) ends the streak."""

    name = "barren"

    def new_state(self) -> _State:
        return _State()

    def reset(self, state: Any) -> Any:
        state.barren = 0
        state.held = None
        return state

    @staticmethod
    def _remember(state: _State, texts: list[str]) -> None:
        recent = state.recent
        if type(recent) is tuple:
            recent = state.recent = []
        recent.extend(texts)
        if len(recent) > _RECENT:
            del recent[:-_RECENT]

    @staticmethod
    def _may_only_look_new(step: Step, run: Any) -> bool:
        """Whether a step's progress is only new plain-text answers (no write, no changed
        state, no plan or goal advance, no JSON record, no view: a view is judged at its
        location), so that it may only look new."""
        if step.wrote or run.plan_advanced or run.goal_improved or step.world:
            return False
        return not any(f.result is not None and (type(f.parsed_result) is not str or f.place is not None)
                       and f.error is None for f in step.facts)

    @staticmethod
    def _only_repeats(state: _State, texts: list[str], before: list[str]) -> bool:
        """Whether every text says nothing the answers before it did not (sketched now,
        each text once while it is recent: this is asked only when a streak resumes right
        after such an answer, and an answer judged now is one the next judgement reads)."""
        if not before:
            return False
        cache = state.sketches
        if cache is None:
            cache = state.sketches = {}
        if len(cache) > 4 * _RECENT:
            keep = set(state.recent)
            for text in [t for t in cache if t not in keep]:
                del cache[text]

        def sketch(text: str) -> Sketch:
            known = cache.get(text)
            if known is None:
                known = cache[text] = Sketch(text)
            return known

        earlier = [sketch(text) for text in before]
        return all(only_repeats(sketch(text), earlier) for text in texts)

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
        if len(step.facts) == 1:
            only = step.facts[0]
            texts = [only.parsed_result] if only.error is None and type(only.parsed_result) is str else []
        else:
            texts = [f.parsed_result for f in step.facts if f.error is None and type(f.parsed_result) is str]
        if progress:
            # A streak ended by new plain text: held, and judged only if the streak resumes.
            state.held = ((state.barren, texts, list(state.recent))
                          if state.barren and texts and self._may_only_look_new(step, run) else None)
            state.barren = 0
            if texts:
                self._remember(state, texts)
            return None
        if step.partial:
            return None  # an equal size or truncated preview does not prove nothing new
        if not comparable or neutral:
            return None  # (a new request answered with silence: a note to self, a 204)
        held = state.held
        if held is not None:
            state.held = None
            if self._only_repeats(state, held[1], held[2]):
                state.barren = held[0]  # it only looked new: neutral, the streak goes on
        if texts:
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
