"""The same answer (seed 000: progress is a property of what the world answers): the same
check answered the same way, whatever the request."""

from __future__ import annotations

from typing import Any

from ...model import Finding, Reason
from ..step import Step
from .base import Signal

__all__ = ["SameAnswerSignal"]

_MAX_ANSWERS = 256  # answers a tool's table holds (past it, it starts afresh)
_MAX_TOOLS = 32  # tools with a table


class _State:
    """Per tool: every answer it gave (bounded), each with where it came back since the
    tool's last new answer (an entry of an older epoch counts nothing: one table and a
    counter a tool, nothing to clear when something new comes)."""

    __slots__ = ("calls", "tools")

    def __init__(self) -> None:
        self.calls = 0  # calls seen, for the window
        # tool -> [epoch, {answer: (epoch, positions)}]
        self.tools: dict[str, list] = {}  # type: ignore[type-arg]


class SameAnswerSignal(Signal):
    """Fires when a tool gives an answer it already gave, for the ``same_answer_count``-th
    time within the last ``frequency_window`` calls, and nothing new came from that tool
    in between.

    This is the coding agent's loop: it edits, re-runs the check and gets an output it
    already had, again and again, while the request differs each time (the edit folded
    into the command, ``sed -i … && python reproduce.py``; the same check through another
    command; a re-applied patch script). Writes in between do not reset the count: an
    edit's own answer is its echo (:attr:`CallFacts.answer` is None for it), and the
    answer the edit leads to is one already seen. What does reset it is the world saying
    something new: the same tool giving an answer it never gave before (a new output, a
    new failure) forgets the answers it had repeated so far.

    An answer is what came back, not what was asked: a failure by its whole normalised
    output (:func:`~otel_progress.evidence.canonical.failure_signature_text`), a result
    with volatile tokens (temporary paths, addresses, times, durations, ids) masked
    (:mod:`otel_progress.evidence.volatile`). Empty results, partial results (a size, a
    preview) and waits on purpose are not answers to compare.

    Its healthy twins stay quiet: a test re-run once to confirm it passes (two
    occurrences), a deliverable checked once more, a build whose output grows (every
    answer new)."""

    name = "same_answer"

    def new_state(self) -> _State:
        return _State()

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        if step.exempt:
            return None
        window = self.config.frequency_window
        need = self.config.same_answer_count
        fired = 0
        loop = None
        tools = state.tools
        for facts in step.facts:
            state.calls += 1
            answer = facts.answer
            if answer is None or facts.wait_command:
                continue
            tool = tools.get(facts.tool)
            if tool is None:
                if len(tools) >= _MAX_TOOLS:
                    tools.pop(next(iter(tools)))
                tool = tools[facts.tool] = [0, {}]
            now = state.calls
            heard = tool[1]
            entry = heard.get(answer)
            if entry is None:
                # Something new from this tool: the answers it repeated so far stop counting.
                if len(heard) >= _MAX_ANSWERS:
                    heard.clear()
                tool[0] += 1
                heard[answer] = (tool[0], [now])
                continue
            epoch = tool[0]
            positions = [p for p in entry[1] if now - p < window] if entry[0] == epoch else []
            positions.append(now)
            heard[answer] = (epoch, positions)
            if len(positions) >= need and len(positions) > fired:
                fired = len(positions)
                loop = answer
        if not fired:
            return None
        return Finding(
            Reason.SAME_ANSWER,
            {"count": fired, "window": window},
            f"the same answer came back {fired} times within the last {window} calls, whatever"
            " was asked, with nothing new from the tool in between",
            loop=loop,
        )
