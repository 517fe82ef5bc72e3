"""The small interface every detector of the scoreboard implements.

A :class:`Detector` makes a fresh :class:`Monitor` per agent invocation (each sub-agent
starts with an empty history, as in the peers' harnesses) or one per trace for
trace-side tools (``scope = "trace"``). The monitor is shown each tool call in order,
with its result, and returns an alarm text the first time the detector would warn,
nudge, ask or block. :meth:`Detector.first_detection` gives the turn of the first alarm.

A detector that checks a call before it runs (Roo Code, Cline, Gemini CLI, ...) raises
its alarm on the turn of that call; one that checks after an observation (OpenHands) on
the turn whose result completed the pattern. Either way the alarm's turn is the turn the
detector would have stopped or nudged the agent at.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..corpus import Call, Run

__all__ = [
    "SHELL_TOOLS",
    "Alarm",
    "Detector",
    "Monitor",
    "raw_json",
    "stable_json",
]

#: Tools whose result is a shell command's output (OpenHands' CmdOutputObservation).
SHELL_TOOLS = frozenset({
    "execute_bash", "terminal", "bash", "shell", "run_shell_command", "run_command", "exec",
    "execute_command",
})


@dataclass(frozen=True)
class Alarm:
    """The first alarm of a detector on a run."""

    turn: int
    detail: str


def stable_json(value: Any) -> str:
    """JSON with sorted keys (safe-stable-stringify, stableStringify, sorted params)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def raw_json(value: Any) -> str:
    """JSON in the key order the model emitted (``JSON.stringify``)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Monitor(ABC):
    """One history: an agent invocation, or a whole trace."""

    @abstractmethod
    def observe(self, call: Call) -> str | None:
        """Show the monitor the next call (with its outcome); an alarm text, or None."""


class Detector:
    """A loop detector behind the scoreboard's interface."""

    name: ClassVar[str] = ""  # short id, e.g. "roo-code"
    title: ClassVar[str] = ""  # the scoreboard's row label
    source: ClassVar[str] = ""  # where the rule is documented (peers.md section)
    scope: ClassVar[str] = "invocation"  # or "trace"

    def monitor(self, run: Run) -> Monitor:
        """A fresh monitor for one history of ``run`` (detectors built on monitors)."""
        raise NotImplementedError(f"{type(self).__name__} does not work call by call")

    def first_alarm(self, run: Run) -> Alarm | None:
        """The first alarm on ``run``, or None."""
        monitors: dict[int, Monitor] = {}
        for step in run.steps:
            key = 0 if self.scope == "trace" else step.invocation
            mon = monitors.get(key)
            if mon is None:
                mon = monitors[key] = self.monitor(run)
            for call in step.calls:
                detail = mon.observe(call)
                if detail is not None:
                    return Alarm(step.turn, detail)
        return None

    def first_detection(self, run: Run) -> int | None:
        """The turn of the first alarm on ``run``, or None: the common interface."""
        alarm = self.first_alarm(run)
        return None if alarm is None else alarm.turn

    def evaluate(self, runs: Sequence[Run]) -> dict[str, Alarm | None]:
        """The first alarm on each run, by run id (detectors that batch override this)."""
        return {run.id: self.first_alarm(run) for run in runs}
