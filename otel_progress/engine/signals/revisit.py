"""State revisits (seeds 000, 004): the run's state returns to where it has been."""

from __future__ import annotations

from typing import Any

from ...model import Finding, Reason
from ..step import Step
from .base import Signal

__all__ = ["RevisitState", "StateRevisitSignal", "revisited"]

_MAX_STATES = 64


class RevisitState:
    """The states a run has been in (the last 64), the current one and the net revisits."""

    __slots__ = ("current", "revisits", "seen")

    def __init__(self) -> None:
        self.seen: dict[Any, None] | None = None  # insertion-ordered set of state digests (made when first needed)
        self.current: Any = None
        self.revisits = 0


def revisited(state: RevisitState, digest: Any) -> bool:
    """Note a step in state ``digest``; whether it moved back to a state seen earlier (a
    revisit, counted). Staying where it is changes nothing; a move to a new state takes
    one revisit back."""
    if digest == state.current:
        return False
    state.current = digest
    seen = state.seen
    if seen is None:
        seen = state.seen = {}
    if digest in seen:
        state.revisits += 1
        return True
    state.revisits = max(0, state.revisits - 1)
    if len(seen) >= _MAX_STATES:
        seen.pop(next(iter(seen)))
    seen[digest] = None
    return False


class StateRevisitSignal(Signal):
    """Uses the state digest a step publishes (``progress.state``: for example a digest
    of the working tree). Moving to a state seen earlier in the run is a revisit; a move
    to a new state takes one back (a lone revert is not a loop). ``revisit_threshold``
    revisits fire: edit, test, revert, test, edit fires by the second cycle."""

    name = "revisit"

    def new_state(self) -> RevisitState:
        return RevisitState()

    def reset(self, state: Any) -> Any:
        state.revisits = 0
        return state

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        digest = run.step_state
        if digest is None or not revisited(state, digest):
            return None
        if state.revisits < self.config.revisit_threshold:
            return None
        return Finding(
            Reason.STATE_REVISIT,
            {"revisits": state.revisits, "states": len(state.seen)},
            f"the run returned to a state it had already been in ({state.revisits} times"
            " without reaching a new one)",
        )
