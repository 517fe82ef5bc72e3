"""Repeat cycles (seed 002): the last 2p steps are one block of p steps played twice."""

from __future__ import annotations

from array import array
from typing import Any

from ...model import Finding, Reason
from ..step import Step
from .base import Signal

__all__ = ["RepeatCycleSignal", "find_period"]


def find_period(keys: list[int] | array[int]) -> int | None:
    """The shortest p with ``keys[-2p:-p] == keys[-p:]``, or None."""
    m = len(keys)
    if m < 2:
        return None
    last = keys[m - 1]
    half = m // 2
    # A period p needs keys[-1 - p] == keys[-1]: when the last key does not occur in
    # keys[-1 - half:-1] (the usual case), no period can match.
    if last not in keys[m - 1 - half : m - 1]:
        return None
    for p in range(1, half + 1):
        if keys[m - 1 - p] == last and keys[m - 2 * p : m - p] == keys[m - p :]:
            return p
    return None


class RepeatCycleSignal(Signal):
    """Fires on the turn the second copy of a repeated block completes.

    Checks every period from 1 to ``window // 2``, shortest first. Memory is the last
    ``window`` step keys. A step whose content was not captured breaks any cycle (it is
    never equal to anything), and so does a step whose result is only a size or a
    truncated preview (evidence level ``arguments``); an exempt wait poll is not recorded
    at all.
    """

    name = "repeat"

    def new_state(self) -> array[int]:
        return array("q")

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        if step.exempt:
            return None
        # A partial result (a size, a truncated preview) never makes two steps equal.
        key = None if step.partial else step.key
        state.append(key if key is not None else -step.turn)
        if len(state) > self.config.window:
            del state[0]
        if key is None or len(state) < 2:
            return None
        period = find_period(state)
        if period is None:
            return None
        return Finding(
            Reason.REPEAT_CYCLE,
            {"period": period, "window": self.config.window},
            f"the last {2 * period} steps were one block of {period} step(s) played twice,"
            " with the same results",
        )
