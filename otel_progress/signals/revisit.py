"""State revisits (seeds 000, 004): the run's state returns to where it has been."""

from __future__ import annotations

from typing import Any

from ..model import Finding, Reason
from .base import Signal, Step

__all__ = ["StateRevisitSignal"]

_MAX_STATES = 64


class _State:
    __slots__ = ("current", "revisits", "seen")

    def __init__(self) -> None:
        self.seen: dict[str, None] = {}  # insertion-ordered set of state digests
        self.current: str | None = None
        self.revisits = 0


class StateRevisitSignal(Signal):
    """Uses the state digest a step publishes (``progress.state``: for example a digest
    of the working tree). Moving to a state seen earlier in the run is a revisit; a move
    to a new state takes one back (a lone revert is not a loop). ``revisit_threshold``
    revisits fire: edit, test, revert, test, edit fires by the second cycle."""

    name = "revisit"

    def new_state(self) -> _State:
        return _State()

    def reset(self, state: Any) -> Any:
        state.revisits = 0
        return state

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        digest = run.step_state
        if digest is None or digest == state.current:
            return None
        state.current = digest
        if digest in state.seen:
            state.revisits += 1
        else:
            state.revisits = max(0, state.revisits - 1)
            if len(state.seen) >= _MAX_STATES:
                state.seen.pop(next(iter(state.seen)))
            state.seen[digest] = None
            return None
        if state.revisits < self.config.revisit_threshold:
            return None
        return Finding(
            Reason.STATE_REVISIT,
            {"revisits": state.revisits, "states": len(state.seen)},
            f"the run returned to a state it had already been in ({state.revisits} times"
            " without reaching a new one)",
        )
