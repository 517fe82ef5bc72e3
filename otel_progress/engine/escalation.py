"""The escalation ladder's texts (seed 004): a nudge that states what was observed and asks
for a falsifiable hypothesis (never fix advice), and a handoff note for a fresh restart
listing what was tried, built from the call fingerprints.

Neither text carries raw arguments or results: only tool names, argument names, counts
and digests, so they are safe to export with the detection.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..model import NOT_CAPTURED, Finding, Level, Reason

__all__ = ["Attempt", "Attempts", "handoff_note", "nudge_text"]


_HYPOTHESIS = (
    "Before calling another tool, write down what you believe is blocking progress and"
    " what observation would prove that belief wrong."
)
#: The request for a hypothesis, where the loop is the model's own (signals/text.py,
#: signals/unexecuted.py): what it is about to do again is answer, or request that call.
_MODEL_HYPOTHESIS = {
    Reason.TEXT_REPEAT: (
        "Before answering again, write down what you believe is blocking progress and what"
        " observation would prove that belief wrong."
    ),
    Reason.UNEXECUTED_REPEAT: (
        "Before requesting that call again, write down why you believe it did not run and"
        " what observation would prove that belief wrong."
    ),
}


class Attempt:
    """One distinct call the run made: its shape (tool and argument names), fingerprint,
    how often it ran, and how often it failed."""

    __slots__ = ("call", "count", "failures", "shape")

    def __init__(self, shape: str, call: int, count: int = 0, failures: int = 0) -> None:
        self.shape = shape
        self.call = call
        self.count = count
        self.failures = failures

    @property
    def fingerprint(self) -> str:
        """Eight hex digits of the call's digest."""
        return f"{self.call:016x}"[:8]


class Attempts:
    """The distinct calls a run made most recently, for the handoff note, in the order
    they were first made (one added past the limit given to :meth:`note` forgets the
    oldest), each with its shape and how often it ran and failed.

    A run keeps this table all its life, so it is stored flat rather than as one
    :class:`Attempt` per call: the call digests and the two counts in one array of
    64-bit integers (three per call), the shapes (shared strings) in a list. Iterating
    gives :class:`Attempt` objects, oldest first.
    """

    __slots__ = ("_shapes", "_tally")

    def __init__(self) -> None:
        self._tally = array("q")  # call digest, count, failures; per call, oldest first
        self._shapes: list[str] = []

    def __len__(self) -> int:
        return len(self._shapes)

    def __iter__(self) -> Iterator[Attempt]:
        t = self._tally
        return (Attempt(shape, t[3 * i], t[3 * i + 1], t[3 * i + 2]) for i, shape in enumerate(self._shapes))

    def values(self) -> list[Attempt]:
        """The attempts, oldest first."""
        return list(self)

    def note(self, call: int, failed: bool, tool: str, arguments: Any, limit: int) -> None:
        """Count one more run (and failure) of a call; a call not in the table is added,
        run once, with its shape (:func:`_shape`), forgetting the oldest past ``limit``."""
        tally = self._tally
        digests = tally[::3]  # (an array of the digest slots: searched without a Python object per item)
        if call in digests:
            i = 3 * digests.index(call)
            tally[i + 1] += 1
            if failed:
                tally[i + 2] += 1
            return
        shapes = self._shapes
        if len(shapes) >= limit:
            del tally[:3]
            del shapes[0]
        tally.extend((call, 1, 1 if failed else 0))
        shapes.append(_shape(tool, arguments))


_SHAPES: dict[str, str] = {}
# (tool, argument names in their order) -> the shared shape: most calls repeat a shape
# seen before, and looking it up is cheaper than sorting and joining the names again.
_SHAPE_OF: dict[tuple[str, tuple[str, ...]], str] = {}


def _shape(name: str, arguments: Any) -> str:
    """``tool(arg1, arg2)``: argument names only, never values. Shapes repeat across
    runs, so one copy of each is shared (a bounded table)."""
    names: tuple[Any, ...] | None = None
    if type(arguments) is dict:
        names = tuple(arguments)
        known = _SHAPE_OF.get((name, names))
        if known is not None:
            return known
    if isinstance(arguments, Mapping):
        text = f"{name}({', '.join(sorted(str(k) for k in arguments)[:6])})"
    else:
        text = f"{name}(…)" if arguments not in (None, NOT_CAPTURED, "", {}) else f"{name}()"
    shared = _SHAPES.get(text)
    if shared is None:
        if len(_SHAPES) >= 4096:
            _SHAPES.clear()
        shared = _SHAPES[text] = text
    # Only names that are strings are remembered: str(k) is then k itself, and equal
    # name tuples give equal shapes (1 and True are equal keys with other shapes).
    if names is not None and all(type(k) is str for k in names):
        if len(_SHAPE_OF) >= 4096:
            _SHAPE_OF.clear()
        _SHAPE_OF[(name, names)] = shared
    return shared


def nudge_text(finding: Finding, level: Level, turn: int, first_turn: int | None) -> str:
    """The message a harness injects into the agent's next turn."""
    observed = finding.observed or f"no progress ({finding.reason.value})"
    text = f"Progress watchdog notice (turn {turn}): {observed}. {_MODEL_HYPOTHESIS.get(finding.reason, _HYPOTHESIS)}"
    if level is Level.RESTART:
        text += (
            f" This run was already notified at turn {first_turn} and the pattern came back;"
            " a harness should restart it from the handoff note."
        )
    elif level is Level.PARK:
        text += (
            " The pattern has persisted through earlier notices; a harness should park this"
            " task for human review."
        )
    return text


def handoff_note(finding: Finding, turn: int, attempts: Iterable[Attempt]) -> str:
    """The note a fresh agent gets: what was tried and did not work."""
    lines = [
        f"Previous attempt stalled at turn {turn} ({finding.reason.value}):"
        f" {finding.observed or 'no progress'}.",
        "What was tried and did not work:",
    ]
    figures = finding.figures
    if finding.reason is Reason.UNEXECUTED_REPEAT:
        lines.append(f"- requested {figures.get('requested_tool', '?')}(…) ×{figures.get('unexecuted', '?')},"
                     f" never run ({figures.get('cause', '?')})")
    elif finding.reason is Reason.TEXT_REPEAT:
        lines.append(f"- the same {figures.get('part', 'text')} from the model ×{figures.get('repeats', '?')},"
                     " nothing new between")
    tried = sorted(attempts, key=lambda a: -a.count)
    for attempt in tried[:8]:
        line = f"- {attempt.shape} [{attempt.fingerprint}] ×{attempt.count}"
        if attempt.failures:
            line += f", failed {attempt.failures}×"
        lines.append(line)
    if not tried and len(lines) == 2:
        lines.append("- (no comparable calls were recorded)")
    lines.append(
        "Do not retry these unchanged. Start by checking the assumption behind them against"
        " the task."
    )
    return "\n".join(lines)
