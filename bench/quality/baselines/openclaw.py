"""OpenClaw's ``tool-loop-detection`` (peers.md §6), enabled (it is off by default; a user
choosing it turns it on), with its constants: history 30, warning 10, critical 20, global
breaker 30, unknown-tool 10. Each call is checked against the history of earlier calls
before it runs (so a ping-pong of 9 recorded calls warns on the 10th); results are hashed
per tool (errors as ``error:<digest>``; ``process`` poll/log on status and output; ``exec``
on status, exit code and output). The first alarm is the first warning."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from ..corpus import Call, Run
from .base import Detector, Monitor, stable_json

HISTORY = 30
WARNING = 10
CRITICAL = 20
GLOBAL_BREAKER = 30
UNKNOWN_TOOL = 10

_UNKNOWN = (re.compile(r"unknown tool[:\s]+[\"']?([a-z0-9_.-]+)[\"']?", re.IGNORECASE),
            re.compile(r"tool\s+[\"']?([a-z0-9_.-]+)[\"']?\s+(?:not found|is not available)", re.IGNORECASE))


def _digest(value: Any) -> str:
    return hashlib.sha256(stable_json(value).encode()).hexdigest()


@dataclass
class _Record:
    tool: str
    args: str
    result: str | None
    unknown_tool: str | None


def _args_hash(call: Call) -> str:
    return f"{call.name}:{_digest(call.args)}"


def _is_known_poll(call: Call) -> bool:
    if call.name == "command_status":
        return True
    return call.name == "process" and isinstance(call.args, dict) and call.args.get("action") in ("poll", "log")


def _outcome(call: Call) -> tuple[str, str | None]:
    if call.error is not None:
        unknown = None
        for pattern in _UNKNOWN:
            m = pattern.search(call.error.message)
            if m:
                unknown = m.group(1).lower()
                break
        return "error:" + _digest(call.error.message), unknown
    result = call.result
    details: dict[str, Any] = result if isinstance(result, dict) else {}
    text = result if isinstance(result, str) else ""
    if _is_known_poll(call) and call.name == "process":
        return _digest({"action": call.args.get("action"), "status": details.get("status"),
                        "exitCode": details.get("exitCode"), "aggregated": details.get("output"),
                        "text": text}), None
    if call.name == "exec" and isinstance(details.get("status"), str):
        return _digest({"status": details["status"], "exitCode": details.get("exitCode"),
                        "output": details.get("output", text)}), None
    if not isinstance(result, dict):
        return _digest(result), None
    return _digest({"details": details, "text": text}), None


class _Monitor(Monitor):
    def __init__(self) -> None:
        self.history: list[_Record] = []

    def _no_progress(self, tool: str, args: str) -> int:
        streak, latest = 0, None
        for rec in reversed(self.history):
            if rec.tool != tool or rec.args != args or not rec.result:
                continue
            if latest is None:
                latest, streak = rec.result, 1
            elif rec.result != latest:
                break
            else:
                streak += 1
        return streak

    def _unknown_streak(self, tool: str) -> int:
        streak, name = 0, None
        for rec in reversed(self.history):
            if rec.tool != tool or not rec.unknown_tool:
                break
            if name is None:
                name, streak = rec.unknown_tool, 1
            elif rec.unknown_tool != name:
                break
            else:
                streak += 1
        return streak

    def _ping_pong(self, current: str) -> tuple[int, bool]:
        if not self.history:
            return 0, False
        last = self.history[-1]
        other = next((r.args for r in reversed(self.history[:-1]) if r.args != last.args), None)
        if other is None:
            return 0, False
        tail = 0
        for rec in reversed(self.history):
            if rec.args != (last.args if tail % 2 == 0 else other):
                break
            tail += 1
        if tail < 2 or current != other:
            return 0, False
        hashes: dict[str, str] = {}
        stable = True
        for rec in self.history[-tail:]:
            if not rec.result or hashes.setdefault(rec.args, rec.result) != rec.result:
                stable = False
                break
        if len(hashes) < 2:
            stable = False
        return tail + 1, stable

    def check(self, call: Call) -> str | None:
        args = _args_hash(call)
        no_progress = self._no_progress(call.name, args)
        poll = _is_known_poll(call)
        if self._unknown_streak(call.name) >= UNKNOWN_TOOL:
            return "critical unknown_tool_repeat"
        if no_progress >= GLOBAL_BREAKER:
            return "critical global_circuit_breaker"
        if poll and no_progress >= CRITICAL:
            return "critical known_poll_no_progress"
        if poll and no_progress >= WARNING:
            return f"warning known_poll_no_progress: {call.name} repeated {no_progress} times with no progress"
        count, stable = self._ping_pong(args)
        if count >= CRITICAL and stable:
            return "critical ping_pong"
        if count >= WARNING:
            return f"warning ping_pong: alternating calls count={count}"
        if not poll and no_progress >= CRITICAL:
            return "critical generic_repeat"
        recent = sum(1 for r in self.history if r.tool == call.name and r.args == args)
        if not poll and recent >= WARNING:
            return f"warning generic_repeat: {call.name} called {recent} times with identical arguments"
        return None

    def observe(self, call: Call) -> str | None:
        alarm = self.check(call)
        result, unknown = _outcome(call)
        self.history.append(_Record(call.name, _args_hash(call), result, unknown))
        del self.history[:-HISTORY]
        return alarm


class OpenClaw(Detector):
    name = "openclaw"
    title = "OpenClaw (tool-loop-detection, enabled)"
    source = "peers.md §6"

    def monitor(self, run: Run) -> Monitor:
        return _Monitor()
