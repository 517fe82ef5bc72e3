"""Requested but never executed (``unexecuted_repeat``): the model keeps asking for a tool
call that never runs.

A request is unexecuted when the harness or the user refused it (a tool call with
``executed`` False: Claude Code's ``tool_decision`` reject, Gemini's and Codex's decision
records, ``gen_ai.tool.call.decision`` deny; cause ``refused``), or when no tool call of
the run answered it by the time the model answered again (an unknown tool, arguments that
did not parse, a call the framework dropped; cause ``unanswered``; how requests and calls
are matched: :mod:`~otel_progress.engine.modelside`). The error the framework feeds back
to the model is what it is answered with, and it is not a tool's answer: nothing new.

The same request (tool name and canonical arguments) unexecuted ``unexecuted_count`` times
(3) with nothing new reaching the run between (the same news as ``text_repeat``'s) is the
detection. Its healthy twins stay quiet: a request refused once or twice and then run,
or answered by a call whose span arrived late (a request that runs is not unexecuted: its
count is forgotten); a refusal followed by another approach that brings something new;
different requests refused in turn (each is counted apart); the run's last requests,
which the run ended before answering (they are judged only when the model answers again:
a run that ended cannot loop any more).

Memory is bounded: the 32 requests counted since the last news.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...model import Finding, Reason
from .model_base import ModelSignal, ModelStep

if TYPE_CHECKING:
    from ..runstate import RunState

__all__ = ["UnexecutedSignal"]

_MAX_REQUESTS = 32


class UnexecutedSignal(ModelSignal):
    """See the module docstring. The state: request digest -> [count, tool, cause]."""

    name = "unexecuted"

    def new_state(self) -> dict[int, list[Any]]:
        return {}

    def executed(self, state: Any, request: int) -> None:
        state.pop(request, None)

    def evaluate(self, step: ModelStep, state: Any, run: RunState) -> Finding | None:
        if step.news:
            state.clear()
        best: list[Any] | None = None
        loop = 0
        for missed in step.unexecuted:
            entry = state.get(missed.request)
            if entry is None:
                if len(state) >= _MAX_REQUESTS:
                    state.pop(next(iter(state)))
                entry = state[missed.request] = [0, missed.tool, missed.cause]
            entry[0] += 1
            entry[2] = missed.cause
            if entry[0] >= self.config.unexecuted_count and (best is None or entry[0] > best[0]):
                best, loop = entry, missed.request
        if best is None:
            return None
        count, tool, cause = best
        return Finding(
            Reason.UNEXECUTED_REPEAT,
            {"unexecuted": count, "cause": cause, "requested_tool": tool},
            f"the model requested the same {tool} call {count} times and it never ran ({cause}),"
            " with nothing new reaching the run in between",
            loop=loop,
        )
