"""Error recurrence (seed 004, signal 3): one error signature, whatever the arguments; and
the same failing request sent again and again."""

from __future__ import annotations

from typing import Any

from ...model import Finding, Reason
from ..step import Step
from .base import Signal

__all__ = ["ErrorRecurrenceSignal"]

_MAX_SIGNATURES = 32
_MAX_REQUESTS = 32


class _State:
    __slots__ = ("counts", "streaks")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}  # error signature -> failures in the run
        # request digest -> (error signature, identical failures of it in a row)
        self.streaks: dict[int, tuple[int, int]] = {}


class ErrorRecurrenceSignal(Signal):
    """Counts failures per error signature (tool, error type and the failure's whole
    normalised output: :func:`~otel_progress.evidence.canonical.failure_signature_text`)
    and fires when one reaches ``error_threshold`` in the run; a failed write (a request
    that carries its content, a file's text or a patch) is not counted there, since it
    says how the agent writes rather than what the world answers. Works with content capture
    off, since status, ``error.type`` and exception events are always recorded.

    It also fires when the identical request (same tool, same canonical arguments) failed
    ``repeat_failure_threshold`` times in a row with the same error signature: one retry
    after a transient error is legitimate, a third identical refusal is not transient.
    Other calls in between (a ``think``, a lookup, a rewrite of the script the failing
    command runs) do not break the streak: the same wrong outcome after three attempts to
    change it is not progress. A success of the request, or another error from it, does.
    A command that waits on purpose (``sleep 5 && curl …``) is a poll and is left to the
    signature count.
    A failure with no message is told apart by its request, so unrelated silent failures
    (different commands exiting nonzero) never add up to one signature. Without captured
    arguments only the signature count applies (names alone are never compared)."""

    name = "errors"

    def new_state(self) -> _State:
        return _State()

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        fired: tuple[int, int] | None = None
        streak_fired: tuple[int, int] | None = None
        counts = state.counts
        streaks = state.streaks
        for facts in step.facts:
            error = facts.error
            if error is None:
                if streaks and facts.call in streaks:
                    del streaks[facts.call]
                continue
            if not facts.writes:
                # (a failed write, whose request carries its content, says how the agent
                # writes rather than what the world answers: only its identical retries count)
                count = counts.get(error, 0) + 1
                if count == 1 and len(counts) >= _MAX_SIGNATURES:
                    counts.pop(next(iter(counts)))  # forget the oldest signature
                counts[error] = count
                if count >= self.config.error_threshold and (fired is None or count > fired[1]):
                    fired = (error, count)
            if facts.args is None or facts.wait_command:
                continue  # arguments not captured (names alone are never compared), or a poll
            last = streaks.get(facts.call)
            n = last[1] + 1 if last is not None and last[0] == error else 1
            if last is None and len(streaks) >= _MAX_REQUESTS:
                streaks.pop(next(iter(streaks)))
            streaks[facts.call] = (error, n)
            if n >= self.config.repeat_failure_threshold and (streak_fired is None or n > streak_fired[1]):
                streak_fired = (error, n)
        if fired is not None:
            signature, count = fired
            return Finding(
                Reason.ERROR_RECURRENCE,
                {"count": count, "error_signature": run.hex(signature)},
                f"the last {count} failures of this run ended with the same error",
                loop=signature,
            )
        if streak_fired is not None:
            signature, count = streak_fired
            return Finding(
                Reason.ERROR_RECURRENCE,
                {"count": count, "error_signature": run.hex(signature), "identical_requests": count},
                f"the same request failed with the same error {count} times in a row",
                loop=signature,
            )
        return None
