"""A port of Pydantic AI Harness's ``LoopDetection`` capability, and a plain fingerprint
guard, as baselines for the scoreboard and the engine benchmark's cost comparison (issue 26).

**Source.** ``pydantic/pydantic-ai-harness`` on GitHub (PyPI ``pydantic-ai-harness``, 0.x
releases), file ``pydantic_ai_harness/loop_detection/_capability.py`` with its
``README.md`` and ``docs/loop-detection.md``, as stored at commit
``f62e67ee976f5fc239c24e7c73958a517dd818a6`` (PR #336; the file carries no version of its
own). Written from a reading of that file, not copied; research notes in
``shared/research/anchors-2026-12-turn4.md`` §1.1.

**The rules ported**, with the capability's defaults:

* *exact repetition* (tier 1): the fingerprint ``tool_name(canonical_args)`` (arguments
  parsed when a JSON string, dumped with ``json.dumps(sort_keys=True, default=str)``; a
  string that is not JSON is kept as it is; no arguments give ``""``) is appended to a
  sliding window of the last ``window`` = 10 calls; it fires when that fingerprint occurs
  ``repeat_threshold`` = 5 times in the window. Firing clears the window and the
  alternation tail.
* *alternation* (tier 2b): the last ``2 * alternation_cycles`` = 6 fingerprints are
  A, B, A, B, A, B with A != B. Checked after tier 1 on the same call; firing clears the
  alternation tail.
* *error cycle* (tier 2a), after the tool ran: ``(fingerprint, repr(result))`` equal to the
  previous call's makes a streak; it fires at ``error_cycle_threshold`` = 3 in a row, and
  resets. The original recomputes the fingerprint here (a second parse and dump of the
  arguments per call); so does the port, since the cost is part of what is compared.
* *monologue* (tier 2c): a model response with no tool call whose text, whitespace
  collapsed, lower-cased and cut to ``monologue_prefix_chars`` = 200 characters, equals the
  previous one's; it fires at ``monologue_threshold`` = 3 in a row. A response with tool
  calls resets it; an empty text is ignored. Ported (:meth:`LoopDetectionPort.text_response`)
  but fed by nothing here: neither the corpus nor the real runs' tool calls hold the
  model's text-only replies.

Each tier, once fired, resets its own counters so the same loop has to rebuild. Hooks as
in the original: a model response with tool calls runs tiers 1 and 2b on each call in
order (stopping at the first that fires); each tool's result then runs tier 2a. A tool
that raised never reaches ``after_tool_execute`` (the capability implements only
``for_run``, ``after_model_request`` and ``after_tool_execute``), so a failed call
(``error``) takes no part in tier 2a.

**Left out**: what happens on a detection (``on_loop``: the ``[harness:loop-detection]``
nudge queued as a user turn, ``LoopDetectedError``, or a callback), the
``loop_detection.detected`` span event, the ``LoopDetected`` record's message and
fingerprints, and the async capability plumbing (``for_run`` is "a new
:class:`LoopDetectionPort` per run"). A detection here is a :class:`LoopHit`.

**The fingerprint guard** (:class:`FingerprintGuard`) is no peer: the plainest guard a
user would write, for scale: a SHA-256 of the tool name and the arguments as emitted,
counted over the run; it fires when one fingerprint reaches ``threshold`` = 3 calls.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..corpus import Call, Run
from .base import Alarm, Detector, Monitor

__all__ = ["Fingerprint", "FingerprintGuard", "LoopDetectionPort", "LoopHit", "PydanticLoopDetection",
           "call_input", "canonical_args", "fingerprint"]


def canonical_args(args: Any) -> str:
    """The order-independent text of a call's arguments, as the capability makes it."""
    if args is None:
        return ""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:  # (json.JSONDecodeError is a ValueError)
            return args
    return json.dumps(args, sort_keys=True, default=str)


def fingerprint(name: str, args: Any) -> str:
    """``tool_name(canonical_args)``."""
    return f"{name}({canonical_args(args)})"


@dataclass(frozen=True)
class LoopHit:
    """One detection of the port: the tier (``exact_repetition``, ``alternation``,
    ``error_cycle``, ``monologue``), the tool (None for a monologue), the count and the
    number of recent items the tier looked at."""

    tier: str
    tool: str | None
    count: int
    window: int

    def __str__(self) -> str:
        return f"{self.tier}: {self.tool or 'text'} x{self.count} (window {self.window})"


class LoopDetectionPort:
    """The per-run state and decisions of ``LoopDetection`` (one instance per run)."""

    def __init__(self, repeat_threshold: int = 5, window: int = 10, error_cycle_threshold: int = 3,
                 alternation_cycles: int = 3, monologue_threshold: int = 3,
                 monologue_prefix_chars: int = 200) -> None:
        self.repeat_threshold = repeat_threshold
        self.error_cycle_threshold = error_cycle_threshold
        self.alternation_cycles = alternation_cycles
        self.monologue_threshold = monologue_threshold
        self.monologue_prefix_chars = monologue_prefix_chars
        self.calls: deque[str] = deque(maxlen=max(window, 1))
        self.alternation: deque[str] = deque(maxlen=max(alternation_cycles * 2, 2))
        self.last_outcome: tuple[str, str] | None = None
        self.outcome_repeats = 0
        self.last_monologue: str | None = None
        self.monologue_repeats = 0

    def response(self, calls: Sequence[tuple[str, Any]]) -> LoopHit | None:
        """A model response with tool calls ``(name, arguments)``: tiers 1 and 2b on each,
        in order, up to the first that fires."""
        self.last_monologue = None
        self.monologue_repeats = 0
        for name, args in calls:
            hit = self._call(name, args)
            if hit is not None:
                return hit
        return None

    def _call(self, name: str, args: Any) -> LoopHit | None:
        fp = fingerprint(name, args)
        self.calls.append(fp)
        self.alternation.append(fp)
        count = self.calls.count(fp)
        if count >= self.repeat_threshold:
            window = len(self.calls)
            self.calls.clear()
            self.alternation.clear()
            return LoopHit("exact_repetition", name, count, window)
        if self._alternating():
            window = len(self.alternation)
            first = self.alternation[-2 * self.alternation_cycles]
            self.alternation.clear()
            return LoopHit("alternation", first.split("(", 1)[0], self.alternation_cycles, window)
        return None

    def _alternating(self) -> bool:
        needed = self.alternation_cycles * 2
        if len(self.alternation) < needed:
            return False
        tail = list(self.alternation)[-needed:]
        a, b = tail[0], tail[1]
        return a != b and all(fp == (a if i % 2 == 0 else b) for i, fp in enumerate(tail))

    def tool_result(self, name: str, args: Any, result: Any) -> LoopHit | None:
        """A tool's result (the tool returned: it did not raise): tier 2a."""
        outcome = (fingerprint(name, args), repr(result))
        if outcome == self.last_outcome:
            self.outcome_repeats += 1
        else:
            self.last_outcome = outcome
            self.outcome_repeats = 1
        if self.outcome_repeats >= self.error_cycle_threshold:
            count = self.outcome_repeats
            self.last_outcome = None
            self.outcome_repeats = 0
            return LoopHit("error_cycle", name, count, count)
        return None

    def text_response(self, text: str) -> LoopHit | None:
        """A model response with no tool call and this text: tier 2c."""
        normal = " ".join(text.split()).lower()[: self.monologue_prefix_chars]
        if not normal:
            return None
        if self.last_monologue is not None and normal == self.last_monologue:
            self.monologue_repeats += 1
        else:
            self.monologue_repeats = 1
        self.last_monologue = normal
        if self.monologue_repeats >= self.monologue_threshold:
            count = self.monologue_repeats
            self.last_monologue = None
            self.monologue_repeats = 0
            return LoopHit("monologue", None, count, count)
        return None

    def step(self, calls: Sequence[tuple[str, Any, Any, bool]]) -> LoopHit | None:
        """One model turn: its calls ``(name, arguments, result, failed)`` through
        :meth:`response` (which stops at the first call that fires, as the capability's
        hook returns there), then every result that was returned through
        :meth:`tool_result` (the tools run whatever the response's check found). The
        turn's first detection, or None."""
        hit = self.response([(name, args) for name, args, _, _ in calls])
        for name, args, result, failed in calls:
            if not failed:
                found = self.tool_result(name, args, result)
                hit = hit or found
        return hit


def call_input(call: Call) -> tuple[str, Any, Any, bool]:
    """A corpus call as the port takes it: (name, arguments, result, failed)."""
    return call.name, call.args, call.result, call.error is not None


class PydanticLoopDetection(Detector):
    """The port behind the scoreboard's interface: one port per agent invocation, fed
    one model turn at a time; the alarm is the first :class:`LoopHit`."""

    name = "pydantic-ai"
    title = "Pydantic AI Harness LoopDetection"
    source = "pydantic/pydantic-ai-harness loop_detection (research anchors turn 4, §1.1)"

    def first_alarm(self, run: Run) -> Alarm | None:
        ports: dict[int, LoopDetectionPort] = {}
        for step in run.steps:
            port = ports.setdefault(step.invocation, LoopDetectionPort())
            hit = port.step([call_input(c) for c in step.calls])
            if hit is not None:
                return Alarm(step.turn, str(hit))
        return None


class Fingerprint:
    """The fingerprint guard's state for one run."""

    def __init__(self, threshold: int = 3) -> None:
        self.threshold = threshold
        self.seen: Counter[bytes] = Counter()

    def observe(self, name: str, args: Any) -> int | None:
        """Count this call; the count when it reaches the threshold, else None."""
        text = args if isinstance(args, str) else ("" if args is None else json.dumps(args))
        key = hashlib.sha256(f"{name}\x1f{text}".encode("utf-8", "surrogatepass")).digest()
        n = self.seen[key] = self.seen[key] + 1
        return n if n >= self.threshold else None


class _FingerprintMonitor(Monitor):
    def __init__(self) -> None:
        self.guard = Fingerprint()

    def observe(self, call: Call) -> str | None:
        n = self.guard.observe(call.name, call.args)
        return None if n is None else f"{call.name} called {n} times with the same arguments"


class FingerprintGuard(Detector):
    """The fingerprint guard behind the scoreboard's interface (not a peer)."""

    name = "fingerprint"
    title = "Fingerprint guard (name + arguments, 3 in a run)"
    source = "bench/quality/baselines/pydantic_ai.py (a reference, not a peer)"

    def monitor(self, run: Run) -> Monitor:
        return _FingerprintMonitor()
