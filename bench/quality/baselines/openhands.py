"""OpenHands' ``StuckDetector``: V0 (``openhands/controller/stuck.py``, peers.md §1) and the
V1 SDK port (``openhands-sdk/.../stuck_detector.py``, peers.md §1b).

Each tool call is an action followed by its observation. Shell tools produce a command
observation (V0 compares only the command and exit code, not the output); other failures
are error observations; an IPython cell's output is a cell observation. Headless mode: the
whole history (there are no user messages in a tool-call corpus).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..corpus import Call, Run
from .base import SHELL_TOOLS, Detector, Monitor, stable_json

_EXIT = re.compile(r"(?:ExitCode|exit_?)(\d+)", re.IGNORECASE)
_SYNTAX_ERRORS = (
    "SyntaxError: unterminated string literal",
    "SyntaxError: invalid syntax. Perhaps you forgot a comma?",
    "SyntaxError: incomplete input",
)


@dataclass(frozen=True)
class _Obs:
    kind: str  # "cmd", "error", "ipython", "other"
    full: str  # the whole observation (V1 equality)
    v0: str  # what V0's equality compares


def _observation(call: Call) -> _Obs:
    if call.name in SHELL_TOOLS:
        exit_code = 0
        if call.error is not None:
            m = _EXIT.search(call.error.type)
            exit_code = int(m.group(1)) if m else 1
        command = stable_json(call.args)
        output = call.error.message if call.error is not None else (call.result_text or "")
        return _Obs("cmd", f"{command}|{exit_code}|{output}", f"{command}|{exit_code}")
    if call.name == "execute_ipython_cell":
        text = call.error.message if call.error is not None else (call.result_text or "")
        return _Obs("ipython", text, text)
    if call.error is not None:
        return _Obs("error", call.error.message, call.error.message)
    text = call.result_text or ""
    return _Obs("other", text, text)


def _action(call: Call) -> str:
    return call.name + "\x1f" + stable_json(call.args)


def _all_equal(items: list[str]) -> bool:
    return all(x == items[0] for x in items)


class _V0(Monitor):
    def __init__(self) -> None:
        self.actions: list[str] = []
        self.obs: list[_Obs] = []

    def observe(self, call: Call) -> str | None:
        self.actions.append(_action(call))
        self.obs.append(_observation(call))
        a, o = self.actions, self.obs
        if len(a) + len(o) < 3:
            return None
        if len(a) >= 4 and _all_equal(a[-4:]) and _all_equal([x.v0 for x in o[-4:]]):
            return "repeating_action_observation: Action, Observation loop detected"
        if len(a) >= 3 and _all_equal(a[-3:]):
            last = o[-3:]
            if all(x.kind == "error" for x in last):
                return "repeating_action_error: Action, ErrorObservation loop detected"
            if all(x.kind == "ipython" for x in last) and _all_equal([x.v0 for x in last]) and any(
                    s in last[0].v0 for s in _SYNTAX_ERRORS):
                return "repeating_action_error: the same SyntaxError three times"
        if len(a) + len(o) >= 6 and len(a) >= 6:
            la, lo = a[-6:], [x.v0 for x in o[-6:]]
            if (la[0] == la[2] == la[4] and la[1] == la[3] == la[5]
                    and lo[0] == lo[2] == lo[4] and lo[1] == lo[3] == lo[5]):
                return "repeating_action_observation_pattern: Action, Observation pattern detected"
        return None


class _V1(Monitor):
    WINDOW_PAIRS = 10  # MAX_EVENTS_TO_SCAN_FOR_STUCK_DETECTION = 20 events

    def __init__(self, action_observation: int = 4, action_error: int = 3, alternating: int = 6) -> None:
        self.n_ao = action_observation
        self.n_ae = action_error
        self.n_alt = alternating
        self.actions: list[str] = []
        self.obs: list[_Obs] = []

    def observe(self, call: Call) -> str | None:
        self.actions.append(_action(call))
        self.obs.append(_observation(call))
        a = self.actions[-self.WINDOW_PAIRS:]
        o = [x.full for x in self.obs[-self.WINDOW_PAIRS:]]
        kinds = [x.kind for x in self.obs[-self.WINDOW_PAIRS:]]
        if len(a) >= self.n_ao and _all_equal(a[-self.n_ao:]) and _all_equal(o[-self.n_ao:]):
            return "stuck: repeating action-observation"
        streak = 0
        for i in range(len(a) - 1, -1, -1):
            if a[i] != a[-1] or kinds[i] != "error":
                break
            streak += 1
        if streak == self.n_ae:
            return (f"nudge: You've called {call.name} with the same arguments {streak} times in a row"
                    " and gotten the same error each time")
        if streak > self.n_ae:
            return "stuck: repeating action-error"
        k = self.n_alt
        if len(a) >= k and all(a[-k + i] == a[-k + i + 2] for i in range(k - 2)) and all(
                o[-k + i] == o[-k + i + 2] for i in range(k - 2)):
            return "stuck: alternating action-observation pattern"
        return None


class OpenHandsV0(Detector):
    name = "openhands-v0"
    title = "OpenHands V0 (StuckDetector)"
    source = "peers.md §1"

    def monitor(self, run: Run) -> Monitor:
        return _V0()


class OpenHandsV1(Detector):
    name = "openhands-v1"
    title = "OpenHands V1 SDK (StuckDetector)"
    source = "peers.md §1b"

    def __init__(self, action_observation: int = 4, action_error: int = 3, alternating: int = 6) -> None:
        self.thresholds = (action_observation, action_error, alternating)

    def monitor(self, run: Run) -> Monitor:
        return _V1(*self.thresholds)
