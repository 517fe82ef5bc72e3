"""Repeat cycles (seed 002): the last 2p steps are one block of p steps played twice."""

from __future__ import annotations

from array import array
from typing import Any

from ...model import Finding, Reason
from ..step import Step
from .base import Signal

__all__ = ["RepeatCycleSignal", "find_period"]


def find_period(keys: list[int] | array[int], shortest: int = 1) -> int | None:
    """The shortest p (from ``shortest``) with ``keys[-2p:-p] == keys[-p:]``, or None."""
    m = len(keys)
    if m < 2:
        return None
    last = keys[m - 1]
    half = m // 2
    # A period p needs keys[-1 - p] == keys[-1]: when the last key does not occur in
    # keys[-1 - half:-1] (the usual case), no period can match.
    if last not in keys[m - 1 - half : m - 1]:
        return None
    for p in range(shortest, half + 1):
        if keys[m - 1 - p] == last and keys[m - 2 * p : m - p] == keys[m - p :]:
            return p
    return None


class _Keys(array):  # type: ignore[type-arg]
    """The window of step keys, and the results of the last two steps (what the step
    before a duplicate's first copy answered tells a retry from a loop)."""

    __slots__ = ("results",)

    def __init__(self, typecode: str) -> None:
        self.results: tuple[int | None, int | None] = (None, None)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        """Written with its slot (an array's own pickling keeps only its items): run state
        outlives its process (engine/snapshot.py)."""
        return type(self), (self.typecode,), (self.tobytes(), self.results)

    def __setstate__(self, state: tuple[bytes, tuple[int | None, int | None]]) -> None:
        self.frombytes(state[0])
        self.results = state[1]


def _step_result(step: Step) -> int | None:
    facts = step.facts
    if len(facts) == 1:
        return facts[0].result
    return hash(tuple(sorted(f.result or 0 for f in facts)))


class RepeatCycleSignal(Signal):
    """Fires on the turn the second copy of a repeated block completes.

    Checks every period from 1 to ``window // 2``, shortest first. Memory is the last
    ``window`` step keys. A step whose content was not captured breaks any cycle (it is
    never equal to anything), and so does a step whose result is only a size or a
    truncated preview (evidence level ``arguments``); an exempt wait poll is not recorded
    at all.

    One duplicate of a single step is a retry, not a loop, when the first copy left
    something to check: a command re-issued once (a re-check: what it runs may have
    changed), or an action that had no visible effect (its answer was the one before
    it: a click that did not take). Such a block needs a third copy. A request whose
    first answer was news and that is sent again for the same answer (an identical
    deterministic search) is a loop at the second copy.
    """

    name = "repeat"

    def new_state(self) -> _Keys:
        return _Keys("q")

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        if step.exempt:
            return None
        # A partial result (a size, a truncated preview) never makes two steps equal.
        key = None if step.partial else step.key
        state.append(key if key is not None else -step.turn)
        if len(state) > self.config.window:
            del state[0]
        before_first = state.results[0]  # what the step before the previous one answered
        state.results = (state.results[1], _step_result(step))
        if key is None or len(state) < 2:
            return None
        period = find_period(state)
        if period == 1 and (len(state) < 3 or state[-3] != key) and (
                any(f.command for f in step.facts) or before_first == state.results[1]):
            period = find_period(state, 2)  # a retry: a loop of one step needs a third copy
        if period is None:
            return None
        return Finding(
            Reason.REPEAT_CYCLE,
            {"period": period, "window": self.config.window},
            f"the last {2 * period} steps were one block of {period} step(s) played twice,"
            " with the same results",
            loop=hash(tuple(state[-period:])),
        )
