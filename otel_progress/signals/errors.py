"""Error recurrence (seed 004, signal 3): one error signature, whatever the arguments."""

from __future__ import annotations

from typing import Any

from ..model import Finding, Reason
from .base import Signal, Step

__all__ = ["ErrorRecurrenceSignal"]

_MAX_SIGNATURES = 32


class ErrorRecurrenceSignal(Signal):
    """Counts failures per error signature (tool, error type, normalised message) and
    fires when one reaches ``error_threshold`` in the run. Works with content capture
    off, since status, ``error.type`` and exception events are always recorded."""

    name = "errors"

    def new_state(self) -> dict[int, int]:
        return {}

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        fired: tuple[int, int] | None = None
        for facts in step.facts:
            if facts.error is None:
                continue
            count = state.get(facts.error, 0) + 1
            if count == 1 and len(state) >= _MAX_SIGNATURES:
                state.pop(next(iter(state)))  # forget the oldest signature
            state[facts.error] = count
            if count >= self.config.error_threshold and (fired is None or count > fired[1]):
                fired = (facts.error, count)
        if fired is None:
            return None
        signature, count = fired
        return Finding(
            Reason.ERROR_RECURRENCE,
            {"count": count, "error_signature": run.hex(signature)},
            f"the last {count} failures of this run ended with the same error",
        )
