"""Context compaction: a boundary in a run, never a reset of its evidence.

Coding agents compact their context (they replace the conversation so far by a summary)
and then redo what they did: they read again the files they had read. The engine is told
of each compaction (:meth:`~otel_progress.engine.ProgressEngine.compaction`), between the
run's steps, and this signal gives the boundary its meaning:

* **A re-read after a compaction is expected once.** A step whose every call repeats a
  call the run completed before the last compaction, with the same result (the same
  request and result digest, or the same size where only sizes are known), is a
  *recovery* step, the first time after that compaction: the signals after this one skip
  it (as they skip an exempt wait poll), so it is neither a repeat, nor counted towards
  frequency, nor a barren step, nor a visit of a state signature, nor an arrival at a
  location already seen. A call that failed, or
  whose content is not known, is never a recovery.
* **A loop that goes on across a compaction is the same loop.** The boundary resets
  nothing: the other signals keep their windows and counters. And a call the run was
  already repeating before the compaction (completed twice or more, with the same
  result, between the two compactions around it) is not a recovery after it: its first
  repeat after the boundary counts as it would have without the compaction, so the loop
  is caught at the same step.
* **Compactions that follow each other with nothing new between them are a livelock**
  (``compaction_livelock``): ``signature_visits`` (3) compactions in a row, with no step
  between any two of them that admitted a result the run had not seen, wrote, changed
  the world, advanced the plan or the goal. As with the state signature, three visits of
  the same state with nothing new admitted between them are the definition worth acting
  on: a compaction with nothing new since the last one is the run back at the same
  state, its context full of what it already knew. A step that cannot show that nothing
  new came back breaks the streak: a failure, a call whose content is not known, a wait
  poll, and, where only sizes are known (evidence level ``arguments``), a request the
  run had not completed before with that size (it may have changed what the others
  return). Where the steps
  between were known only by size, the detection carries ``evidence_level = arguments``:
  the identical requests sent again with nothing that came back differing.

Memory is bounded: the step keys since the last compaction and those completed before it
(1,024 each; past that the oldest are forgotten, which can only make a re-read count as
usual, or a streak start again).
"""

from __future__ import annotations

from array import array
from collections import Counter
from typing import TYPE_CHECKING, Any

from ...model import Compaction, Finding, Reason
from ..digests import holds
from ..step import Step
from .base import Signal

if TYPE_CHECKING:
    from ..runstate import RunState

__all__ = ["CompactionSignal"]

_MAX_KEYS = 1024


class _State:
    __slots__ = ("before", "compactions", "epoch", "news", "partial", "start_tokens", "start_turn", "streak")

    def __init__(self) -> None:
        self.epoch = array("q")  # the step keys completed since the last compaction (the latest 1,024)
        self.before: dict[int, bool] = {}  # key completed before it -> whether it was being repeated
        self.compactions = 0
        self.streak = 0  # compactions in a row with nothing new between them
        self.news = False  # something new (or not provably old) since the last compaction
        self.partial = False  # a step of the streak was known only by size
        self.start_tokens = 0
        self.start_turn = 0


def _note(epoch: array[int], step: Step) -> None:
    for f in step.facts:
        if f.key is not None:  # (None: failed, or nothing to compare)
            epoch.append(f.key)
    if len(epoch) > _MAX_KEYS:
        del epoch[:_MAX_KEYS // 4]


class CompactionSignal(Signal):
    """See the module docstring. Runs right after the wait signal (it grants the recovery
    exemption the later signals honour). Until a run's first compaction it only notes the
    keys of its steps."""

    name = "compaction"
    uses_boundaries = True

    def new_state(self) -> _State:
        return _State()

    def reset(self, state: Any) -> Any:
        """A detection was announced: the streak is its evidence (the next one needs new
        compactions); what was read before the boundary is not, and is kept."""
        state.streak = 0
        state.news = False
        return state

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        if not state.compactions:  # (the common case: note the keys, as _note, inline)
            if not step.exempt:
                epoch = state.epoch
                for f in step.facts:
                    if f.key is not None:
                        epoch.append(f.key)
                if len(epoch) > _MAX_KEYS:
                    del epoch[:_MAX_KEYS // 4]
            return None
        if step.exempt:
            state.news = True  # a wait poll: waiting is a state, not "nothing new"
            return None
        before, epoch = state.before, state.epoch
        facts = step.facts
        recovery = comparable = bool(facts)
        for f in facts:
            key = f.key
            if key is None:
                recovery = comparable = False  # a failure, or nothing to compare
                continue
            again = holds(epoch, key)
            looping = before.get(key)
            if again or looping is not False:
                recovery = False  # again since the compaction, never read before, or being repeated
            if f.partial and not again and looping is None:
                comparable = False  # a new request (or size): it may have changed what the others return
        _note(epoch, step)
        if step.partial:
            state.partial = True
        if (not comparable or step.wrote or step.new_evidence or run.plan_advanced or run.goal_improved
                or (step.world and run.step_state is None)):
            state.news = True
        elif recovery:
            step.exempt = step.recovery = True  # read again once after the compaction: not a loop by itself
        return None

    def boundary(self, state: Any, run: RunState, compaction: Compaction) -> Finding | None:
        """A compaction between the run's steps: close the epoch, count the streak."""
        before = state.before
        for key, n in Counter(state.epoch).items():
            before.pop(key, None)
            if len(before) >= _MAX_KEYS:
                before.pop(next(iter(before)))
            before[key] = n >= 2
        del state.epoch[:]
        state.compactions += 1
        if state.streak == 0 or state.news:
            state.streak = 1
            state.start_tokens, state.start_turn = run.tokens, run.turn
            state.partial = False
        else:
            state.streak += 1
        state.news = False
        if state.streak < self.config.signature_visits:
            return None
        burned = run.tokens - state.start_tokens
        figures: dict[str, Any] = {"compactions": state.streak, "tokens_burned": burned,
                                   "steps": run.turn - state.start_turn}
        if compaction.trigger:
            figures["compaction_trigger"] = compaction.trigger
        if compaction.tokens_before is not None:
            figures["tokens_before"] = compaction.tokens_before
        if compaction.tokens_after is not None:
            figures["tokens_after"] = compaction.tokens_after
        if state.partial:
            figures["evidence_level"] = "arguments"
        return Finding(
            Reason.COMPACTION_LIVELOCK,
            figures,
            f"the run compacted its context {state.streak} times in a row with nothing new between the"
            f" compactions (only what it had already seen), burning {burned} tokens",
        )
