"""Waits and polls (seed 000): identical polls are legitimate while there is something
to wait for and the wait budget lasts; the manifest says what that means per tool."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ...model import Finding, Reason
from ..manifest import ToolSpec
from ..step import CallFacts, Step
from .base import Signal

__all__ = ["WaitSignal"]

_MAX_EPISODES = 16
_NS = 1_000_000_000
_STATUS_KEYS = ("status", "state", "phase")
_TEXT_WAIT = re.compile(
    r"\b(still running|in progress|pending|queued|waiting for|not (?:yet )?finished|no new output)\b",
    re.IGNORECASE,
)


class _Episode:
    __slots__ = ("first_wait_ns", "last_ns", "reported", "terminal")

    def __init__(self) -> None:
        self.first_wait_ns: int | None = None
        self.last_ns: int | None = None
        self.terminal = False
        # Once a wait detection was reported, further polls are ordinary steps: the
        # repeat and no-progress checks judge them, so the ladder needs new evidence.
        self.reported = False


class WaitSignal(Signal):
    """Manifest wait tools: a poll whose status is a waiting value is exempt from the
    repeat, frequency and no-progress checks while the budget (``max_wait_seconds`` from
    the first waiting poll, by span timestamps) lasts and polls respect
    ``min_interval_seconds``. A poll after a terminal value (``poll_after_terminal``), a
    status in neither list (``unknown_wait_state``) and a poll past the budget
    (``wait_timeout``) are detections.

    Without a manifest entry (``implicit_waits``), a result whose ``status``/``state``/
    ``phase`` is a common waiting value (or a short text saying it is still running) is
    exempt for ``implicit_max_wait_seconds``; past that it is a ``wait_timeout``. So is a
    command that waits on purpose before it looks (``sleep 5 && cat job.log``): checking a
    background job after a pause is a poll, whatever it prints.
    """

    name = "wait"

    def new_state(self) -> dict[int, _Episode]:
        return {}

    def reset(self, state: Any) -> Any:
        return state  # episodes are facts about the world, not evidence of the loop

    def _episode(self, state: dict[int, _Episode], facts: CallFacts) -> _Episode:
        ep = state.get(facts.call)
        if ep is None:
            if len(state) >= _MAX_EPISODES:
                state.pop(next(iter(state)))
            ep = state[facts.call] = _Episode()
        return ep

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        manifest = self.config.manifest
        all_exempt = True
        finding: Finding | None = None
        calls = step.calls
        for i, facts in enumerate(step.facts):
            spec = manifest.get(facts.tool) if manifest else None
            if spec is not None and spec.kind == "call":
                spec = None  # (an entry that only declares a request's identity: no wait role)
            if spec is not None and spec.kind == "write":
                all_exempt = False
                continue
            if facts.result is None:
                all_exempt = False
                continue
            if spec is None and facts.wait:
                # A command that waits on purpose (sleep, then look): a poll, with the
                # implicit wait budget.
                exempt, found = self._implicit_poll(calls[i], facts, state, deliberate=True)
            elif spec is not None:
                exempt, found = self._manifest_poll(spec, calls[i], facts, state)
            elif facts.parsed_result is None:
                # No parsed value (a long result digested as received, or null): not a
                # waiting status, as _is_waiting(None) says; _implicit_poll's own branch
                # for a result that is not waiting, without the call.
                ep = state.get(facts.call)
                if ep is not None:
                    ep.first_wait_ns = None
                all_exempt = False
                continue
            else:
                exempt, found = self._implicit_poll(calls[i], facts, state)
            all_exempt = all_exempt and exempt
            finding = finding or found
        step.exempt = all_exempt and finding is None
        return finding

    def _manifest_poll(
        self, spec: ToolSpec, call: Any, facts: CallFacts, state: dict[int, _Episode]
    ) -> tuple[bool, Finding | None]:
        ep = self._episode(state, facts)
        if ep.reported:
            return False, None
        status = spec.status_of(facts.parsed_result)
        previous_ns, ep.last_ns = ep.last_ns, call.start_ns
        found = self._manifest_finding(spec, call, ep, status, previous_ns)
        if found[1] is not None:
            ep.reported = True
        return found

    def _manifest_finding(
        self, spec: ToolSpec, call: Any, ep: _Episode, status: str | None, previous_ns: int | None
    ) -> tuple[bool, Finding | None]:
        if ep.terminal:
            return False, Finding(
                Reason.POLL_AFTER_TERMINAL,
                {"poll_tool": spec.name},
                f"{spec.name} was polled again after it had reported a terminal status",
            )
        if status in spec.terminal_values:
            ep.terminal = True
            return False, None
        if status not in spec.waiting_values:
            return False, Finding(
                Reason.UNKNOWN_WAIT_STATE,
                {"poll_tool": spec.name},
                f"{spec.name} reported a status that is neither a waiting nor a terminal value",
            )
        if ep.first_wait_ns is None:
            ep.first_wait_ns = call.start_ns
        waited = (call.end_ns - ep.first_wait_ns) / _NS
        if waited > spec.max_wait_seconds:
            return False, Finding(
                Reason.WAIT_TIMEOUT,
                {"waited_seconds": round(waited, 3), "max_wait_seconds": spec.max_wait_seconds},
                f"{spec.name} has been waited on for {waited:.0f} s, past its budget of"
                f" {spec.max_wait_seconds:.0f} s, without reaching a terminal status",
            )
        if previous_ns is not None and (call.start_ns - previous_ns) / _NS < spec.min_interval_seconds:
            return False, None  # polling faster than declared: no exemption
        return True, None

    def _implicit_poll(
        self, call: Any, facts: CallFacts, state: dict[int, _Episode], deliberate: bool = False
    ) -> tuple[bool, Finding | None]:
        if not self.config.implicit_waits or not (
                deliberate or _is_waiting(facts.parsed_result, self.config.waiting_values)):
            ep = state.get(facts.call)
            if ep is not None:
                ep.first_wait_ns = None  # the wait ended; a later one has its own budget
            return False, None
        ep = self._episode(state, facts)
        if ep.reported:
            return False, None
        if ep.first_wait_ns is None:
            ep.first_wait_ns = call.start_ns
        ep.last_ns = call.start_ns
        waited = (call.end_ns - ep.first_wait_ns) / _NS
        limit = self.config.implicit_max_wait_seconds
        if waited > limit:
            ep.reported = True
            return False, Finding(
                Reason.WAIT_TIMEOUT,
                {"waited_seconds": round(waited, 3), "max_wait_seconds": limit},
                f"{facts.tool} has been waited on for {waited:.0f} s, past the"
                f" default wait budget of {limit:.0f} s",
            )
        return True, None


#: _TEXT_WAIT's phrases: in an ASCII text, a match of the pattern lower-cases to one of them.
_TEXT_WAIT_PHRASES = ("still running", "in progress", "pending", "queued", "waiting for", "not finished",
                      "not yet finished", "no new output")
#: A part of each phrase, of letters whose only case-insensitive matches are their upper and
#: lower case (no i, s or k): in any text, a match lower-cases to a text holding one of them.
_TEXT_WAIT_PARTS = ("runn", "progre", "pend", "queued", "ng for", "hed", "no new outp")


def _is_waiting(result: Any, waiting: frozenset[str]) -> bool:
    if type(result) is str:
        if len(result) > 512:
            return False
        if result.strip().lower() in waiting:
            return True
        # (cheap necessary conditions first: most results mention no wait at all)
        lowered = result.lower()
        for part in _TEXT_WAIT_PHRASES if result.isascii() else _TEXT_WAIT_PARTS:
            if part in lowered:
                return _TEXT_WAIT.search(result) is not None
        return False
    if isinstance(result, Mapping):
        for key in _STATUS_KEYS:
            value = result.get(key)
            if isinstance(value, str) and value.strip().lower() in waiting:
                return True
        return False
    if isinstance(result, str) and len(result) <= 512:
        return result.strip().lower() in waiting or bool(_TEXT_WAIT.search(result))
    return False
