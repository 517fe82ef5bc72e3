"""OpenLIT's trace-side "Agent loops" flag (peers.md §9, PR #1494): tool spans of one
trace grouped by ``gen_ai.tool.name`` and the whitespace-collapsed
``gen_ai.tool.call.arguments`` text; three occurrences (not necessarily consecutive) flag
the trace. Results are not compared; spans without arguments (content capture off) are
ignored. The flag is raised on the turn of the third occurrence."""

from __future__ import annotations

import re

from ..corpus import Call, Run
from .base import Detector, Monitor

_WS = re.compile(r"\s+")
THRESHOLD = 3


class _Monitor(Monitor):
    def __init__(self, capture: bool) -> None:
        self.capture = capture
        self.counts: dict[tuple[str, str], int] = {}

    def observe(self, call: Call) -> str | None:
        if not self.capture:
            return None  # the span carries no gen_ai.tool.call.arguments
        args = _WS.sub(" ", call.args_text).strip()
        if args in ("", "{}", "null"):
            return None
        key = (call.name, args)
        self.counts[key] = self.counts.get(key, 0) + 1
        if self.counts[key] == THRESHOLD:
            return f"Agent loops: {call.name} called {THRESHOLD} times with the same arguments"
        return None


class OpenLIT(Detector):
    name = "openlit"
    title = "OpenLIT (trace-side loop flag)"
    source = "peers.md §9"
    scope = "trace"

    def monitor(self, run: Run) -> Monitor:
        return _Monitor(run.capture)
