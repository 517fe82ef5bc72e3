"""Gemini CLI's tool-call tier (peers.md §2): key = sha256(name + ":" + JSON.stringify(args))
(key-order sensitive), the last 25 keys kept; a loop when, for a cycle length k in 1..5,
the last 5k keys are the last k keys repeated five times. Results are never looked at.
The first detection injects feedback (first strike); the content and LLM tiers are not
part of a tool-call corpus."""

from __future__ import annotations

import hashlib
from collections import deque

from ..corpus import Call, Run
from .base import Detector, Monitor, raw_json

TOOL_CALL_LOOP_THRESHOLD = 5
MAX_CYCLE = 5
HISTORY = 25


class _Monitor(Monitor):
    def __init__(self) -> None:
        self.keys: deque[str] = deque(maxlen=HISTORY)

    def observe(self, call: Call) -> str | None:
        self.keys.append(hashlib.sha256(f"{call.name}:{raw_json(call.args)}".encode()).hexdigest())
        keys = list(self.keys)
        for k in range(1, MAX_CYCLE + 1):
            n = TOOL_CALL_LOOP_THRESHOLD * k
            if len(keys) < n:
                break
            block = keys[-k:]
            if all(keys[-n + j] == block[j % k] for j in range(n)):
                return f"Potential loop detected: a cycle of {k} tool call(s) repeated {TOOL_CALL_LOOP_THRESHOLD} times"
        return None


class GeminiCLI(Detector):
    name = "gemini-cli"
    title = "Gemini CLI (tool-call tier)"
    source = "peers.md §2"

    def monitor(self, run: Run) -> Monitor:
        return _Monitor()
