"""The no-progress counter (seed 000): consecutive steps that put nothing new in the run."""

from __future__ import annotations

from typing import Any

from ..model import Finding, Reason
from .base import Signal, Step

__all__ = ["BarrenSignal"]


class _State:
    __slots__ = ("barren", "last")

    def __init__(self) -> None:
        self.last: dict[str, int] = {}  # tool -> digest of its last result
        self.barren = 0


class BarrenSignal(Signal):
    """A step is progress when any call's result differs from that tool's previous
    result (an empty result never counts), a tool declared ``write`` succeeded (and, where
    the step publishes a state digest, the state is new), the plan advanced, or the goal
    distance improved. Other steps are barren; ``barren_threshold`` in a row fires.
    Exempt wait polls are neither progress nor barren. Steps without captured content
    are judged only by the published facts (writes, plan, goal distance)."""

    name = "barren"

    def new_state(self) -> _State:
        return _State()

    def reset(self, state: Any) -> Any:
        state.barren = 0
        return state

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        if step.exempt:
            return None
        progress = step.wrote or run.plan_advanced or run.goal_improved
        comparable = progress
        for facts in step.facts:
            if facts.result is None:
                continue
            comparable = True
            if state.last.get(facts.tool) != facts.result:
                state.last[facts.tool] = facts.result
                if not facts.empty:
                    progress = True
        if progress:
            state.barren = 0
            return None
        if not comparable:
            return None
        state.barren += 1
        if state.barren < self.config.barren_threshold:
            return None
        return Finding(
            Reason.BARREN,
            {"barren_steps": state.barren},
            f"{state.barren} steps in a row returned nothing new (same or empty results,"
            " no write, no plan or goal progress)",
        )
