"""OpenCode / Kilo CLI's doom-loop check (peers.md §5): when the last three tool parts,
the new call included, have the same tool name and the same ``JSON.stringify(input)``
(key-order sensitive), the ``doom_loop`` permission is asked. (The real check only looks at
the parts of the current assistant message; this re-implementation looks at the whole
invocation, which can only make it fire earlier.)"""

from __future__ import annotations

from collections import deque

from ..corpus import Call, Run
from .base import Detector, Monitor, raw_json

DOOM_LOOP_THRESHOLD = 3


class _Monitor(Monitor):
    def __init__(self) -> None:
        self.parts: deque[tuple[str, str]] = deque(maxlen=DOOM_LOOP_THRESHOLD)

    def observe(self, call: Call) -> str | None:
        key = (call.name, raw_json(call.args))
        self.parts.append(key)
        if len(self.parts) == DOOM_LOOP_THRESHOLD and all(p == key for p in self.parts):
            return f"doom_loop permission asked for {call.name}"
        return None


class OpenCode(Detector):
    name = "opencode"
    title = "OpenCode / Kilo CLI (doom_loop)"
    source = "peers.md §5"

    def monitor(self, run: Run) -> Monitor:
        return _Monitor()
