"""Roo Code's ``ToolRepetitionDetector`` (peers.md §3a): consecutive identical calls
(name and parameters serialised key-order independently); with the default
``consecutiveMistakeLimit`` of 3 the fourth consecutive identical call is blocked and the
user is asked (``mistake_limit_reached``). After a block the counter starts again."""

from __future__ import annotations

from ..corpus import Call, Run
from .base import Detector, Monitor, stable_json


class _Monitor(Monitor):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.previous: str | None = None
        self.count = 0

    def observe(self, call: Call) -> str | None:
        key = stable_json({"name": call.name, "params": call.args})
        if key == self.previous:
            self.count += 1
        else:
            self.count = 0
            self.previous = key
        if self.limit > 0 and self.count >= self.limit:
            self.count = 0
            self.previous = None
            return f"Roo appears to be stuck in a loop, attempting the same action ({call.name}) repeatedly"
        return None


class RooCode(Detector):
    name = "roo-code"
    title = "Roo Code (ToolRepetitionDetector)"
    source = "peers.md §3a"

    def __init__(self, limit: int = 3) -> None:
        self.limit = limit

    def monitor(self, run: Run) -> Monitor:
        return _Monitor(self.limit)
