"""Cline's loop detection (peers.md §3c, PR #9933): consecutive calls with the same tool and
the same key-sorted parameters (``task_progress`` removed). A soft warning goes to the model
at the third identical call, the hard mistake-limit stop at the fifth; the first alarm is
the soft warning."""

from __future__ import annotations

from typing import Any

from ..corpus import Call, Run
from .base import Detector, Monitor, stable_json


def _signature(args: Any) -> str:
    if isinstance(args, dict):
        args = {k: v for k, v in args.items() if k != "task_progress"}
    return stable_json(args)


class _Monitor(Monitor):
    def __init__(self, soft: int, hard: int) -> None:
        self.soft = soft
        self.hard = hard
        self.last: tuple[str, str] | None = None
        self.count = 0

    def observe(self, call: Call) -> str | None:
        key = (call.name, _signature(call.args))
        self.count = self.count + 1 if key == self.last else 1
        self.last = key
        if self.count == self.soft:
            return (f"Tool [{call.name}] has been called {self.soft} times consecutively with identical"
                    " arguments. This is not making progress")
        if self.count == self.hard:
            return f"mistake limit: {self.hard} consecutive identical calls to {call.name}"
        return None


class Cline(Detector):
    name = "cline"
    title = "Cline (loop-detection, soft 3 / hard 5)"
    source = "peers.md §3c"

    def __init__(self, soft: int = 3, hard: int = 5) -> None:
        self.soft = soft
        self.hard = hard

    def monitor(self, run: Run) -> Monitor:
        return _Monitor(self.soft, self.hard)
