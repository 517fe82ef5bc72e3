"""LogRunTracker: runs grouped by run key, ordered by the readers' order key inside the
reorder buffer, redelivered records counted once, bounded runs, idle ends."""

from __future__ import annotations

import random

from otel_progress import ProgressEngine
from otel_progress.otlp.logs_json import records_from_request
from otel_progress.runs.logruns import LogRunTracker

from .conftest import documents, golden


def _records(name: str) -> list:
    out, index = [], 0
    for doc in documents(golden(name)):
        views = list(records_from_request(doc, start_index=index))
        index += len(views)
        out.extend(views)
    return out


def _detect(records: list, **kwargs) -> list[tuple[str, int]]:
    tracker = LogRunTracker(ProgressEngine(), **kwargs)
    found = []
    for record in records:
        found.extend(tracker.add(record)[0])
    for end in tracker.finish():
        found.extend(end.detections)
    return sorted((d.reason.value, d.turn) for d in found)


def test_shuffled_input_gives_the_same_detections() -> None:
    records = _records("codex-0.171.0-loop.jsonl")
    expected = _detect(records)
    # six identical commands: the first re-issue is a re-check, the third copy the loop (issue 25)
    assert expected == [("repeat_cycle", 3), ("repeat_cycle", 6)]
    shuffled = list(records)
    random.Random(7).shuffle(shuffled)
    assert _detect(shuffled) == expected


def test_interleaved_runs_and_redelivery() -> None:
    codex = _records("codex-0.171.0-loop.jsonl")
    claude = _records("claude-code-2.1.332-failing-command-details.jsonl")
    mixed = [r for pair in zip(codex, claude, strict=False) for r in pair] + codex[len(claude):] + claude[len(codex):]
    doubled = mixed + mixed  # an export retried: every record twice
    got = _detect(doubled)
    assert got == sorted(_detect(codex) + _detect(claude))
    assert ("error_recurrence", 3) in got


def test_max_runs_ends_the_least_recent_run() -> None:
    tracker = LogRunTracker(ProgressEngine(), max_runs=1)
    ends = []
    for record in _records("codex-0.171.0-loop.jsonl") + _records("qwen-code-0.24.4-loop.jsonl"):
        ends.extend(tracker.add(record)[1])
    evicted = [e for e in ends if e.why == "max_runs"]
    assert [e.run.run_key.split("|")[0] for e in evicted] == ["codex"]
    assert evicted[0].summary is not None and evicted[0].summary.turns == 6
    assert tracker.runs_evicted == 1
    # Qwen Code ends its session with a session.end event: its run ended there, explicitly
    assert [e.run.run_key.split("|")[0] for e in ends if e.why == "session_end"] == ["qwen_code"]
    assert len(tracker.runs) == 0


def test_idle_runs_end() -> None:
    now = [100.0]
    tracker = LogRunTracker(ProgressEngine(), idle_seconds=30, clock=lambda: now[0])
    for record in _records("codex-0.171.0-loop.jsonl"):
        tracker.add(record)
    assert tracker.end_idle() == []
    now[0] += 31
    [end] = tracker.end_idle()
    assert [d.reason.value for d in end.detections].count("repeat_cycle") == 2
    assert not tracker.runs and tracker.engine.active_traces == 0


def test_window_zero_feeds_at_once_and_release_flushes() -> None:
    tracker = LogRunTracker(ProgressEngine(), reorder_window=0)
    found = []
    for record in _records("codex-0.171.0-loop.jsonl"):
        found.extend(tracker.add(record)[0])
    found.extend(tracker.release())
    assert sorted(d.turn for d in found) == [3, 6]
    assert all(not run.buffer for run in tracker.runs.values())
