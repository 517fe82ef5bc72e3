"""The labelling rules: the earliest turn at which a stuck run's loop is provable.

Each stuck run names the rule(s) that apply to it (``rule:``) and records
``earliest_turn``; :func:`earliest_turn` recomputes it from the calls as the minimum over
those rules, and the corpus tests check that the stored number is what the rule gives.
The rules are written from the seed documents and peers.md, not from the engine:

``cycle``
    Seed 002: the first turn at which the last 2p turns are one block of p turns played
    twice (any p), a turn keyed on tool, canonical arguments (sorted keys) and result or
    error (clock times, UUIDs and request ids in results masked, seed 000's volatile
    fields). The same call with a different result is progress.
``nothing-new``
    Seed 000: four turns in a row that put nothing new into the run ("never exceed four
    outside of waiting"). A turn brings something new when one of its calls returns a
    non-empty result containing a line the tool had not returned before in the run, or an
    error never seen before. Empty results ("0 results", [], {}) never count.
``same-failure``
    Seed 004, signal 3: the same failure (one normalised error signature, or one failing
    test named in the result) ends five attempts; the fifth is the turn.
``same-request-failure``
    Issue 11 (peers: strict same-call-twice, CrewAI, Goose): the identical request (tool,
    canonical arguments) failed with the same error three times in a row (other calls in
    between allowed; a success of that request or another error from it restarts the
    count); the third failure is the turn. Commands that wait on purpose (``sleep N``)
    are polls, not requests.
``state-cycle``
    Seeds 000/004: the published working-state digests (consecutive duplicates collapsed)
    play a block of p states twice: A, B, A, B fires on the second B (a lone revert is no
    loop).
``signature``
    Seed 003: the same normalised action (tool, arguments lower-cased, id fields dropped)
    taken for the third time with nothing new admitted to the run between the visits.
``lap``
    Seed 003: three sub-agent invocations in a row complete with the run's shared
    evidence (every distinct result so far) unchanged; the last turn of the third.
``measure``
    Seed 003: a published monotone measure (``measure:``) that has not dropped below its
    value at the first of three visits to one plan node; the third visit.
``wait-budget``
    Seed 000: the first poll that starts after the declared wait budget
    (``max_wait_seconds`` of the run's manifest entry) ran out, counted from the first poll
    that reported a waiting value.
``poll-after-terminal``
    Seed 000: the first poll of a job after it reported a terminal status.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from .corpus import Call, Run, Step

__all__ = ["RULE_FUNCTIONS", "earliest_turn", "rule_turn"]

_VOLATILE_TEXT = [
    re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2}| ?UTC)?"),
    re.compile(r"\b\d{1,2}:\d{2}:\d{2}\b"),
    re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE),
]
_VOLATILE_KEYS = {"timestamp", "ts", "time", "now", "served_at", "request_id", "etag", "latency_ms", "date"}
_EMPTY = re.compile(
    r"^(?:0|no|zero)\s+\w+(?:\s+found)?\.?$|^(?:no results?|nothing found|none|null|\[\]|\{\})\.?$",
    re.IGNORECASE,
)
_TERMINAL = {"success", "succeeded", "failed", "failure", "done", "completed", "complete", "cancelled",
             "canceled", "error", "timed_out"}
_ID_KEY = re.compile(r"_ids?$|^uuid$", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")
_PATHS = re.compile(r"(?:/[\w.\-]+){2,}")


def _mask(text: str) -> str:
    for pattern in _VOLATILE_TEXT:
        text = pattern.sub("<volatile>", text)
    return text


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if str(k).lower() not in _VOLATILE_KEYS}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _result_text(call: Call) -> str:
    if call.error is not None:
        return f"!{call.error.type}:{call.error.message}"
    if isinstance(call.result, str):
        return _mask(call.result.strip())
    return _mask(json.dumps(_plain(call.result), sort_keys=True, separators=(",", ":")))


def _call_key(call: Call) -> str:
    args = json.dumps(call.args, sort_keys=True, separators=(",", ":"))
    return f"{call.name}\x1f{args}\x1f{_result_text(call)}"


def _step_key(step: Step) -> str:
    return "\x1e".join(sorted(_call_key(c) for c in step.calls))


def _first_doubled_block(keys: list[str]) -> int | None:
    """The first 1-based index at which the sequence ends in a block played twice."""
    for m in range(2, len(keys) + 1):
        for p in range(1, m // 2 + 1):
            if keys[m - 2 * p : m - p] == keys[m - p : m]:
                return m
    return None


def _cycle(run: Run) -> int | None:
    return _first_doubled_block([_step_key(s) for s in run.steps])


def _is_empty(call: Call) -> bool:
    result = call.result
    if call.error is not None:
        return False
    if result is None:
        return True
    if isinstance(result, str):
        return not result.strip() or bool(_EMPTY.match(result.strip()))
    if isinstance(result, (list, Mapping)):
        values = result.values() if isinstance(result, Mapping) else result
        return all(v in (None, "", 0, [], {}) for v in values)
    return False


def _error_signature(call: Call) -> str:
    assert call.error is not None
    message = _PATHS.sub("<path>", call.error.message)
    message = _DIGITS.sub("N", message)
    return f"{call.name}|{call.error.type}|{' '.join(message.lower().split())}"


def _lines(call: Call) -> list[str]:
    text = _result_text(call)
    if isinstance(call.result, str):
        return [line.strip() for line in text.splitlines() if line.strip()]
    return [text]


def _nothing_new(run: Run, limit: int = 4) -> int | None:
    seen_lines: dict[str, set[str]] = {}
    seen_errors: set[str] = set()
    barren = 0
    for step in run.steps:
        new = False
        for call in step.calls:
            if call.error is not None:
                sig = _error_signature(call)
                if sig not in seen_errors:
                    seen_errors.add(sig)
                    new = True
                continue
            if _is_empty(call):
                continue
            lines = seen_lines.setdefault(call.name, set())
            for line in _lines(call):
                if line not in lines:
                    lines.add(line)
                    new = True
        barren = 0 if new else barren + 1
        if barren >= limit:
            return step.turn
    return None


def _same_failure(run: Run, limit: int = 5) -> int | None:
    counts: dict[str, int] = {}
    for step in run.steps:
        for call in step.calls:
            if call.error is not None:
                sig = _error_signature(call)
            elif call.failure is not None:
                sig = f"{call.name}|failure|{call.failure}"
            else:
                continue
            counts[sig] = counts.get(sig, 0) + 1
            if counts[sig] >= limit:
                return step.turn
    return None


_SLEEP = re.compile(r"(?:^|[;&|(\s])sleep\s+\d")


def _same_request_failure(run: Run, limit: int = 3) -> int | None:
    streaks: dict[str, tuple[str, int]] = {}
    for step in run.steps:
        for call in step.calls:
            request = f"{call.name}\x1f{json.dumps(call.args, sort_keys=True)}"
            if call.error is None:
                streaks.pop(request, None)
                continue
            if call.args is None or _SLEEP.search(str((call.args or {}).get("command", ""))):
                continue
            sig = _error_signature(call)
            last = streaks.get(request)
            n = last[1] + 1 if last is not None and last[0] == sig else 1
            streaks[request] = (sig, n)
            if n >= limit:
                return step.turn
    return None


def _state_cycle(run: Run) -> int | None:
    collapsed: list[str] = []
    for step in run.steps:
        state = next((c.state for c in reversed(step.calls) if c.state is not None), None)
        if state is None or (collapsed and collapsed[-1] == state):
            continue
        collapsed.append(state)
        if _first_doubled_block(collapsed) == len(collapsed):
            return step.turn
    return None


def _fold(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.lower().split())
    if isinstance(value, Mapping):
        return {str(k).lower(): _fold(v) for k, v in value.items() if not _ID_KEY.search(str(k))}
    if isinstance(value, list):
        return [_fold(v) for v in value]
    return value


def _signature(run: Run, visits_needed: int = 3) -> int | None:
    evidence: set[str] = set()
    version = 0
    visits: dict[str, list[int]] = {}
    for step in run.steps:
        action = "\x1e".join(sorted(
            c.name + json.dumps(_fold(c.args), sort_keys=True) for c in step.calls
        ))
        marks = visits.setdefault(action, [])
        if marks and marks[-1] != version:
            marks.clear()
        marks.append(version)
        if len(marks) >= visits_needed:
            return step.turn
        for call in step.calls:
            if call.error is None and not _is_empty(call):
                text = _result_text(call)
                if text not in evidence:
                    evidence.add(text)
                    version += 1
    return None


def _lap(run: Run, laps_needed: int = 3) -> int | None:
    evidence: set[str] = set()
    invocation_last: dict[int, int] = {}
    for step in run.steps:
        if step.invocation:
            invocation_last[step.invocation] = step.turn
    ends = {turn: inv for inv, turn in invocation_last.items()}
    unchanged = 0
    last_size: int | None = None
    for step in run.steps:
        for call in step.calls:
            if call.error is None and call.result is not None:
                evidence.add(_result_text(call))
        if step.turn in ends:
            size = len(evidence)
            unchanged = unchanged + 1 if size == last_size else 1
            last_size = size
            if unchanged >= laps_needed:
                return step.turn
    return None


def _measure(run: Run, visits_needed: int = 3) -> int | None:
    values: dict[str, list[float]] = {}
    for step in run.steps:
        for call in step.calls:
            if call.measure is None:
                continue
            seq = values.setdefault(call.node or "", [])
            seq.append(call.measure)
            window = seq[-visits_needed:]
            if len(window) == visits_needed and min(window[1:]) >= window[0]:
                return step.turn
    return None


def _manifest(run: Run) -> dict[str, Mapping[str, Any]]:
    config = run.config or {}
    entries = config.get("manifest") or config.get("tools") or []
    return {e["name"]: e for e in entries if isinstance(e, Mapping) and e.get("kind") == "wait"}


def _status(call: Call, field: str = "status") -> str | None:
    node: Any = call.result
    if isinstance(node, str):
        try:
            node = json.loads(node)
        except ValueError:
            return None
    for part in field.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return None if node is None else str(node).lower()


def _wait_budget(run: Run) -> int | None:
    specs = _manifest(run)
    first_wait: dict[str, float] = {}
    for step in run.steps:
        for call in step.calls:
            spec = specs.get(call.name)
            if spec is None:
                continue
            key = call.name + json.dumps(call.args, sort_keys=True)
            if key in first_wait and step.tools_start > first_wait[key] + float(spec["max_wait_seconds"]):
                return step.turn
            status = _status(call, str(spec.get("progress_field", "status")))
            waiting = {str(v).lower() for v in spec.get("waiting_values", [])}
            if status in waiting:
                first_wait.setdefault(key, step.tools_start)
    return None


def _poll_after_terminal(run: Run) -> int | None:
    specs = _manifest(run)
    finished: set[str] = set()
    for step in run.steps:
        for call in step.calls:
            key = call.name + json.dumps(call.args, sort_keys=True)
            if key in finished:
                return step.turn
            spec = specs.get(call.name)
            terminal = {str(v).lower() for v in spec["terminal_values"]} if spec else _TERMINAL
            if _status(call, str(spec.get("progress_field", "status")) if spec else "status") in terminal:
                finished.add(key)
    return None


RULE_FUNCTIONS: dict[str, Callable[[Run], int | None]] = {
    "cycle": _cycle,
    "nothing-new": _nothing_new,
    "same-failure": _same_failure,
    "same-request-failure": _same_request_failure,
    "state-cycle": _state_cycle,
    "signature": _signature,
    "lap": _lap,
    "measure": _measure,
    "wait-budget": _wait_budget,
    "poll-after-terminal": _poll_after_terminal,
}


def rule_turn(run: Run, rule: str) -> int | None:
    """The turn one rule gives for a run (None: the rule never holds)."""
    return RULE_FUNCTIONS[rule](run)


def earliest_turn(run: Run) -> int | None:
    """The minimum, over the run's rules, of the turn each gives."""
    turns = [t for r in run.rules if (t := rule_turn(run, r)) is not None]
    return min(turns) if turns else None
