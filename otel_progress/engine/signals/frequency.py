"""Frequency (seed 004, signal 1): the same call with the same result N times in M steps."""

from __future__ import annotations

from array import array
from typing import Any

from ...model import Finding, Reason
from ..digests import count_last
from ..step import Step
from .base import Signal

__all__ = ["FrequencySignal"]

_MAX_REQUESTS = 256  # requests with a partial result a run remembers having seen


class _Keys(array):  # type: ignore[type-arg]
    """The window of keys, and the requests with a partial result seen so far (made on
    first use; cleared past its cap, which can only start a count afresh)."""

    requests: set[int] | None = None

class FrequencySignal(Signal):
    """Fires when one call key (name, arguments, result) occurs ``frequency_count`` times
    within the last ``frequency_window`` calls, consecutive or not. Calls are counted one
    by one, so the same call issued many times in one parallel batch counts too. The key
    includes the result, so a test suite re-run after each edit (new results) never counts
    as the same call.

    Occurrences separated by a change and its effect count apart: once the run has both
    changed the world (a write, a new command that succeeded silently, an acknowledged
    new request) and admitted a result it had never seen (the run's epoch ends), the
    earlier occurrences are forgotten. Re-running a script that prints the same
    status line after each rewrite, while the check that follows shows a new result each
    time, is progress; the same output after three rewrites with nothing new in between
    is not, and neither is re-reading an unchanged file between other reads.

    Where a result is only a size or a truncated preview (evidence level ``arguments``),
    the key holds the request and that size or preview: the count then claims only what
    is known, the identical request sent N times with nothing that came back differing
    (a differing size or preview is a new key and a new result), never the same result.
    Such occurrences count together only while no new request succeeded between them:
    with only sizes known, a request the run had not sent before (an edit, a new command)
    may have changed what the repeated one returns, so it starts the count afresh.
    """

    name = "frequency"

    uses_epochs = True

    def new_state(self) -> array[int]:
        return _Keys("q")

    def epoch_ended(self, state: Any) -> Any:
        del state[:]
        return state

    @staticmethod
    def _forget_before_new_request(step: Step, keys: Any) -> None:
        """Start the count afresh when a call with a partial result is a request the run
        had not sent before and succeeded: it may have changed what the others return."""
        requests = keys.requests
        if requests is None:
            requests = keys.requests = set()
        for facts in step.facts:
            if facts.partial and facts.error is None and facts.call not in requests:
                if len(requests) >= _MAX_REQUESTS:
                    requests.clear()
                requests.add(facts.call)
                del keys[:]

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        if step.exempt:
            return None
        keys = state
        if step.partial:
            self._forget_before_new_request(step, keys)
        count = 0
        loop = None
        window = self.config.frequency_window
        for facts in step.facts:
            key = facts.key
            if key is None:
                continue
            keys.append(key)
            if len(keys) > window:
                del keys[0]
            n = count_last(keys, key)
            if n > count:
                count = n
                loop = key
        if count < self.config.frequency_count:
            return None
        if step.partial:
            return Finding(
                Reason.FREQUENCY,
                {"count": count, "window": self.config.frequency_window},
                f"the identical request was sent {count} times within the last {len(keys)} calls,"
                " and nothing that came back differed (only sizes or truncated previews were known)",
                loop=loop,
            )
        return Finding(
            Reason.FREQUENCY,
            {"count": count, "window": self.config.frequency_window},
            f"the same call returned the same result {count} times within the last"
            f" {len(keys)} calls",
            loop=loop,
        )
