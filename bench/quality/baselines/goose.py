"""Goose's ``RepetitionInspector`` REP-002 (peers.md §4, PR #8994): the tool name and the
first 100 characters of its error are remembered; the same tool failing with the same text
extends a streak, any success clears it. Once the streak reaches 3, the next request for
that tool is denied. (REP-001, consecutive identical calls, is off by default:
``max_repetitions = None``.)"""

from __future__ import annotations

from ..corpus import Call, Run
from .base import Detector, Monitor

MAX_CONSECUTIVE_ERROR_FINGERPRINTS = 3


class _Monitor(Monitor):
    def __init__(self) -> None:
        self.fingerprint: tuple[str, str] | None = None
        self.streak = 0

    def observe(self, call: Call) -> str | None:
        if (self.fingerprint is not None and self.streak >= MAX_CONSECUTIVE_ERROR_FINGERPRINTS
                and call.name == self.fingerprint[0]):
            text = self.fingerprint[1]
            self.fingerprint, self.streak = None, 0
            return f"REP-002: '{call.name}' has returned the same error 3 consecutive times: {text}"
        if call.error is None:
            self.fingerprint, self.streak = None, 0  # record_success
            return None
        fingerprint = (call.name, call.error.message[:100])
        if fingerprint == self.fingerprint:
            self.streak += 1
        else:
            self.fingerprint, self.streak = fingerprint, 1
        return None


class GooseRep002(Detector):
    name = "goose"
    title = "Goose (REP-002 repeated error)"
    source = "peers.md §4"

    def monitor(self, run: Run) -> Monitor:
        return _Monitor()
