"""Metamorphic tests of the evidence rules (issue 25), each both ways, on synthetic runs and
on the real runs of the development halves (``../shared/realtraces``, where present):

* **novelty**: give every result of a run a real new value (not noise) and no
  ``no_progress`` reason may fire; the run as recorded does fire (the other way);
* **volatility**: re-randomise the temporary paths, addresses, times, durations and ids in
  a looping run's outputs and its detections must not change; changing a real value in
  the same place does change them (the other way);
* **a single retry**: a command re-issued once, back to back, with the same output never
  fires; a third copy does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from bench.bench_engine import REAL_DIR, iter_traces, real_files, record_replay
from otel_progress import Config, Detection, ProgressEngine, ToolCall
from otel_progress.evidence.content import is_empty, says_nothing_found
from otel_progress.model import EVENT_NO_PROGRESS

from .helpers import brief, call, run

Transform = Callable[[int, ToolCall], ToolCall]

SWEBENCH = REAL_DIR / "swebench" / "openhands_swebv.jsonl.gz"


# -- helpers ----------------------------------------------------------------------------------

def _replay(ops: Sequence[tuple[str, tuple, dict]], transform: Transform | None = None) -> list[Detection]:
    """Feed recorded engine calls to a fresh engine, each tool call through ``transform``."""
    engine = ProgressEngine(Config())
    out: list[Detection] = []
    index = 0
    for name, args, kw in ops:
        if name == "observe" and transform is not None:
            index += 1
            args = (transform(index, args[0]), *args[1:])
        result = getattr(engine, name)(*args, **kw)
        if name in ("observe", "flush", "compaction"):
            out.extend(result)
        elif name == "end_trace":
            for summary in result:
                out.extend(summary.detections_list)
    return out


def _with_text(c: ToolCall, edit: Callable[[str], str]) -> ToolCall:
    """``c`` with ``edit`` applied to its result text and its failure message."""
    changes: dict[str, Any] = {}
    if isinstance(c.result, str):
        changes["result"] = _edit_json_or_text(c.result, edit)
    if c.error and isinstance(c.error_message, str):
        changes["error_message"] = edit(c.error_message)
    return dataclasses.replace(c, **changes) if changes else c


def _edit_json_or_text(text: str, edit: Callable[[str], str]) -> str:
    if text[:1] in "{[":
        try:
            value = json.loads(text)
        except ValueError:
            return edit(text)
        return json.dumps(_edit_json(value, edit))
    return edit(text)


def _edit_json(value: Any, edit: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return edit(value)
    if isinstance(value, dict):
        return {k: _edit_json(v, edit) for k, v in value.items()}
    if isinstance(value, list):
        return [_edit_json(v, edit) for v in value]
    return value


def _word(n: int) -> str:
    """A pronounceable word of its own for every ``n`` (letters only: a word, not an id),
    more than one letter away from every other (a one-letter difference reads as a
    mis-transcription of a page)."""
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    digest = hashlib.blake2b(str(n).encode(), digest_size=8).digest()
    return "".join(consonants[b % 14] if k % 2 == 0 else vowels[b % 5] for k, b in enumerate(digest))


def _novel(i: int, c: ToolCall) -> ToolCall:
    """Every result says something the run has not heard: a new fact in words of its own,
    put after the answer's first line (where a page names itself, a view stays a view)."""
    w1, w2, w3, w4 = (_word(4 * i + k) for k in range(4))
    fact = f"Finding {i}: {w1} {w2} {w3} {w4} ({i * 37})"

    def add(text: str) -> str:
        head, sep, rest = text.partition("\n")
        return f"{head}\n{fact}\n{rest}" if sep else f"{text}\n{fact}"

    if isinstance(c.result, str) and c.result[:1] in "{[":
        try:
            value = json.loads(c.result)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return dataclasses.replace(c, result=json.dumps({**value, "new_finding": fact}))
        if isinstance(value, list):
            return dataclasses.replace(c, result=json.dumps([*value, fact]))
    if isinstance(c.result, str):
        if is_empty(c.result) or says_nothing_found(c.result):
            # (an answer that found nothing, with a line added, still found nothing: the
            # new value is a finding in its place)
            return dataclasses.replace(c, result=fact, error_message=fact if c.error else c.error_message)
        return _with_text(c, add)
    return c


_TEMP = re.compile(r"/tmp/tmp[\w]+")
_ADDRESS = re.compile(r"0x[0-9a-f]{8,}")
_STAMP = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?")
_DURATION = re.compile(r"\b\d+\.\d+s\b")


def _revolatile(seed: int) -> Transform:
    """Fresh temporary paths, addresses, time stamps and durations in every output."""
    rng = random.Random(seed)

    def fresh(_: re.Match[str], kind: str) -> str:
        if kind == "temp":
            return "/tmp/tmp" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789_") for _ in range(8))
        if kind == "address":
            return "0x7f" + "".join(rng.choice("0123456789abcdef") for _ in range(10))
        if kind == "stamp":
            return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:" \
                   f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        return f"{rng.randint(0, 99)}.{rng.randint(0, 99):02d}s"

    def edit(text: str) -> str:
        text = _TEMP.sub(lambda m: fresh(m, "temp"), text)
        text = _ADDRESS.sub(lambda m: fresh(m, "address"), text)
        text = _STAMP.sub(lambda m: fresh(m, "stamp"), text)
        return _DURATION.sub(lambda m: fresh(m, "duration"), text)

    return lambda i, c: _with_text(c, edit)


def _key(d: Detection) -> tuple[str, int, str, int]:
    return d.span_id, d.turn, d.reason.value, int(d.level)


# -- synthetic runs -----------------------------------------------------------------------------

def _coding_loop(rng: random.Random, laps: int = 4) -> list[dict]:
    """Edit, re-run the reproduction: the same traceback each time, but for the temporary
    directory, the object address and the duration; the edit folded into the command."""
    seq = []
    for lap in range(laps):
        tmp = "/tmp/tmp" + "".join(rng.choice("abcdefgh0123") for _ in range(8))
        address = f"0x7f{rng.randrange(16 ** 10):010x}"
        out = (f"Traceback (most recent call last):\n  File \"{tmp}/reproduce.py\", line {12 + lap}, in <module>\n"
               f"    check(<Widget object at {address}>)\nAssertionError: expected 6, got 5\n"
               f"Ran 1 test in {rng.random():.3f}s")
        seq.append(call("edit", {"path": "widget.py", "new_str": f"return total + {lap}  # attempt {lap}"},
                        f"Edited widget.py: return total + {lap}  # attempt {lap}"))
        seq.append(call("bash", {"command": f"sed -i 's/v{lap}/v{lap + 1}/' cfg && python reproduce.py"}, out,
                        error=True, error_type="nonzero_exit", error_message=out))
    return seq


def test_volatile_tokens_do_not_make_a_coding_loop_look_like_progress() -> None:
    first = brief(run(_coding_loop(random.Random(1))))
    again = brief(run(_coding_loop(random.Random(2))))
    assert first, "edit, re-run, the same traceback three times: the coding agent's loop"
    assert first == again  # other temporary paths, addresses and durations: the same detections


def test_a_real_value_that_changes_is_news() -> None:
    # the other way: the assertion's figure moves each lap (the edits do something)
    seq = _coding_loop(random.Random(1))
    for lap, i in enumerate(range(1, len(seq), 2)):
        out = seq[i]["result"].replace("got 5", f"got {5 - lap}")
        seq[i] = {**seq[i], "result": out, "error_message": out}
    assert run(seq) == []


def test_novelty_silences_a_synthetic_loop() -> None:
    seq = _coding_loop(random.Random(3))
    assert run(seq)
    made = [ToolCall(**{k: v for k, v in spec.items() if k in ToolCall.__dataclass_fields__}) for spec in seq]
    assert all(_novel(i, c).result != c.result for i, c in enumerate(made, 1))
    novel = [{**spec, "result": _novel(i, made[i - 1]).result,
              **({"error_message": _novel(i, made[i - 1]).error_message} if spec.get("error") else {})}
             for i, spec in enumerate(seq, 1)]
    assert [d for d in run(novel) if d.reason.event == EVENT_NO_PROGRESS] == []


def test_a_single_retry_of_a_command_never_fires() -> None:
    check = call("bash", {"command": "pytest tests/test_x.py -q"}, "1 failed, 4 passed in 0.31s\nFAILED test_x.py::t")
    seq = [call("bash", {"command": "ls"}, "a.py\nb.py"), check, check,
           call("edit", {"path": "a.py", "new_str": "x = 2"}, "Edited a.py: x = 2"),
           call("bash", {"command": "pytest tests/test_x.py -q"}, "5 passed in 0.29s\n")]
    assert run(seq) == []
    # the other way: a third identical copy is a loop
    assert brief(run([*seq[:3], check]))[:1] == [(4, "repeat_cycle", 1)]


def test_a_search_repeated_for_the_same_news_is_a_loop() -> None:
    # ReAct's deterministic search sent again for the answer it already had: a loop at once
    search = call("Search", {"entity": "Sadok Sassi"}, "Sadok Sassi is a Tunisian former goalkeeper born 1945.")
    seq = [call("Search", {"entity": "Tunisia"}, "Tunisia is a country in North Africa."), search, search]
    assert brief(run(seq))[:1] == [(3, "repeat_cycle", 1)]


def test_a_click_with_no_visible_effect_is_retried_once() -> None:
    page = "Issues page\n- #12 crash on start\n- #13 slow export"
    seq = [call("open", {"url": "https://example.org/issues"}, page),
           call("click", {"target": "Filter: bug"}, page), call("click", {"target": "Filter: bug"}, page)]
    assert run(seq) == []  # the first click changed nothing visible: the second is a retry
    assert brief(run([*seq, seq[-1]]))[:1] == [(4, "repeat_cycle", 1)]  # the third is the loop


# -- real runs ----------------------------------------------------------------------------------

def _real_traces() -> list[tuple[str, list]]:
    files = [*real_files(), *([SWEBENCH] if SWEBENCH.exists() else [])]
    if not files:
        pytest.skip(f"real runs absent ({REAL_DIR})")
    return [(source, record_replay(spans)[0]) for source, spans in iter_traces(files)]


@pytest.fixture(scope="module")
def flagged() -> list[tuple[str, list, list[Detection]]]:
    """Up to 12 runs with a detection from each source, with their recorded engine calls."""
    out: list[tuple[str, list, list[Detection]]] = []
    per_source: dict[str, int] = {}
    for source, ops in _real_traces():
        if per_source.get(source, 0) >= 12:
            continue
        found = _replay(ops)
        if found:
            out.append((source, ops, found))
            per_source[source] = per_source.get(source, 0) + 1
    assert out
    return out


def test_novelty_silences_every_real_loop(flagged) -> None:
    for source, ops, found in flagged:
        assert [d for d in found if d.reason.event == EVENT_NO_PROGRESS] or found  # as recorded: it fires
        left = [d for d in _replay(ops, _novel) if d.reason.event == EVENT_NO_PROGRESS]
        assert left == [], (source, [(d.turn, d.reason.value) for d in left])


def test_volatile_tokens_do_not_change_real_detections(flagged) -> None:
    changed = 0
    for seed, (source, ops, found) in enumerate(flagged):
        transform = _revolatile(seed)
        calls = [args[0] for name, args, _ in ops if name == "observe"]
        changed += sum(transform(i, c) != c for i, c in enumerate(calls, 1))
        assert [_key(d) for d in _replay(ops, transform)] == [_key(d) for d in found], source
    assert changed, "no output of the sampled runs carried a volatile token: the test proves nothing"


def test_a_single_retry_never_fires_on_real_healthy_runs() -> None:
    """Resolved coding runs without a detection, with one command re-issued back to back
    (the same output): still quiet. Both ways: issued twice more, it fires."""
    tried = 0
    for source, ops in _real_traces():
        if tried >= 15 or "swebv" not in source or _replay(ops):
            continue
        at = next((k for k, (name, args, _) in enumerate(ops) if name == "observe"
                   and "command" in str(args[0].arguments)[:20] and not args[0].error and args[0].result), None)
        if at is None:
            continue
        tried += 1
        original = ops[at][1][0]
        gap = max(original.end_ns - original.start_ns, 1)

        kw = dict(ops[at][2])

        def copy(n: int, original: ToolCall = original, gap: int = gap, kw: dict = kw) -> tuple[str, tuple, dict]:
            c = dataclasses.replace(original, span_id=f"{original.span_id[:-2]}{n:02x}",
                                    start_ns=original.end_ns + n, end_ns=original.end_ns + n + gap // 1000)
            return ("observe", (c,), kw)

        once = [*ops[: at + 1], copy(1), *ops[at + 1:]]
        assert _replay(once) == [], source
        thrice = [*ops[: at + 1], copy(1), copy(2), *ops[at + 1:]]
        assert any(d.reason.value == "repeat_cycle" for d in _replay(thrice)), source
    if not tried:
        pytest.skip("no resolved SWE-bench run without a detection to retry in")


def test_the_real_sources_are_read() -> None:
    # (guards the fixtures above from silently reading nothing where the data exists)
    if not Path(REAL_DIR).is_dir():
        pytest.skip("real runs absent")
    assert sum(1 for _ in _real_traces()) > 500
