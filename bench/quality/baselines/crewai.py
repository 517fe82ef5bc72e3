"""CrewAI's repeated-input refusal (peers.md §8, ``ToolUsage._check_tool_repeated_usage``):
a call equal to the immediately previous one (tool name and argument mapping) is not run;
the model is told "I tried reusing the same input, I must stop using this action input"."""

from __future__ import annotations

from ..corpus import Call, Run
from .base import Detector, Monitor, stable_json


class _Monitor(Monitor):
    def __init__(self) -> None:
        self.last: tuple[str, str] | None = None

    def observe(self, call: Call) -> str | None:
        key = (call.name, stable_json(call.args))  # dict equality: key order irrelevant
        repeated = key == self.last
        self.last = key
        return f"refused: {call.name} reused the same input" if repeated else None


class CrewAIRepeatedInput(Detector):
    name = "crewai"
    title = "CrewAI repeated-input refusal"
    source = "peers.md §8 (CrewAI ToolUsage._check_tool_repeated_usage)"

    def monitor(self, run: Run) -> Monitor:
        return _Monitor()
