"""The strict same-call-twice check (seed 002): stop when the same tool is called with the
same arguments twice in a row, arguments compared as the raw string the model emitted."""

from __future__ import annotations

from ..corpus import Call, Run
from .base import Detector, Monitor, raw_json


class _Monitor(Monitor):
    def __init__(self) -> None:
        self.last: str | None = None

    def observe(self, call: Call) -> str | None:
        key = call.name + "\x1f" + raw_json(call.args)
        repeated = key == self.last
        self.last = key
        return f"{call.name} called twice in a row with the same arguments" if repeated else None


class StrictRepeat(Detector):
    name = "strict"
    title = "Strict same-call-twice"
    source = "seed 002 ('the strict check from agent loops and stop conditions')"

    def monitor(self, run: Run) -> Monitor:
        return _Monitor()
