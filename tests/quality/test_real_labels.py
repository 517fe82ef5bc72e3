"""The hand labels of detections and loops on the real runs stay true as the engine changes.

Reads ``../shared/realtraces/*.jsonl.gz`` and ``added/*.jsonl.gz`` (skips with a message when
absent; the project never ships those runs; the ``swebench/`` half is held to the floors of
``bench/quality/floors.yaml`` by ``tests/quality/test_gate.py`` instead) and runs ``otel-progress scan`` over them with
the defaults. Fails when a labelled false alarm fires again, a labelled loop is no longer
caught inside its window, a detection has no label (label it in
``bench/quality/real_labels.yaml``), or a target of issues 11 and 15 is missed: at least 95%
of detections real loops, at least 80% of the labelled loops of every source caught inside
their window, no passing ReAct run flagged, at most 3% of passing runs flagged, every
identical failing request sent three times in a row caught by its third failure (commands
that sleep first are polls, as in the engine). The processor makes the same detections.
"""

from __future__ import annotations

import json
from functools import cache

import pytest

from bench.quality import real
from bench.quality.realruns import REAL_DIR, RealRun, load_real_runs, real_files
from otel_progress.evidence.content import command_of, is_deliberate_wait


@cache
def _data() -> tuple[list[RealRun], list[real.RealDetection]]:
    files = real_files(swebench=False)
    runs = load_real_runs(files)
    return runs, real.scan_detections(files, runs)


@pytest.fixture(scope="module")
def data() -> tuple[list[RealRun], list[real.RealDetection]]:
    if not real_files(swebench=False):
        pytest.skip(f"no real runs at {REAL_DIR} (they are not part of the project)")
    return _data()


def _windows(labels) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    for entry in labels["loops"]:
        out.setdefault(entry["run"], []).append(real.window(entry))
    return out


def test_labels_name_known_runs_and_calls(data) -> None:
    runs, _ = data
    by_id = {r.id: r for r in runs}
    labels = real.load_labels()
    for entry in labels["loops"]:
        assert entry["run"] in by_id, entry["run"]
        first, last = real.window(entry)
        assert 1 <= first <= last <= len(by_id[entry["run"]].calls), entry
        assert entry["why"].strip()
    windows = _windows(labels)
    for entry in labels["detections"]:
        assert entry["verdict"] in ("real_loop", "false_alarm"), entry
        assert entry["run"] in by_id, entry["run"]
        assert 1 <= int(entry["call"]) <= len(by_id[entry["run"]].calls), entry
        assert entry["why"].strip()
        if entry["verdict"] == "real_loop" and not entry["run"].startswith("tau:"):
            # (the dev half's tau-bench labels predate windows; their loops are labelled too)
            assert any(a <= int(entry["call"]) <= b for a, b in windows.get(entry["run"], ())), (
                f"a real loop detection outside every labelled loop window of its run: {entry}")
    for entry in labels["no_detection"]:
        assert entry["verdict"] in ("no_loop", "missed_loop"), entry
        assert entry["run"] in by_id, entry["run"]


def test_every_detection_is_labelled_and_no_false_alarm_fires_again(data) -> None:
    _, detections = data
    sorted_labels = real.labelled(detections, real.load_labels())
    assert sorted_labels["false_alarm"] == [], "labelled false alarms fired again"
    assert sorted_labels["unlabelled"] == [], (
        "detections without a hand label (add them to bench/quality/real_labels.yaml)")


def test_labelled_real_loops_are_still_caught(data) -> None:
    _, detections = data
    calls: dict[str, list[int]] = {}
    for d in detections:
        calls.setdefault(d.run, []).append(d.call)
    labels = real.load_labels()
    windows = _windows(labels)
    for entry in labels["detections"]:
        if entry["verdict"] != "real_loop":
            continue
        run, call = entry["run"], int(entry["call"])
        around = [(a, b) for a, b in windows.get(run, ()) if a <= call <= b]
        if around:  # the loop it caught must still be caught inside its window
            a, b = around[0]
            assert any(a <= c <= b for c in calls.get(run, ())), f"no longer caught in its window: {entry}"
        else:
            assert min(calls.get(run, [10**9])) <= call, f"no longer caught: {entry}"


def test_quality_targets_on_real_runs(data) -> None:
    runs, detections = data
    labels = real.load_labels()
    sorted_labels = real.labelled(detections, labels)
    assert detections, "no detection at all on the real runs"
    assert len(sorted_labels["real_loop"]) >= 0.95 * len(detections)
    passing = [r for r in runs if r.passed]
    flagged = {d.run for d in detections}
    assert sum(r.id in flagged for r in passing) <= 0.03 * len(passing)
    assert not [r.id for r in passing if r.harness == "react-hotpotqa" and r.id in flagged]
    score = real.score_ours("scan", runs, detections)
    for harness in sorted({r.harness for r in runs}):
        ids = {r.id for r in runs if r.harness == harness}
        caught, total = real.loops_caught(score, [e for e in labels["loops"] if e["run"] in ids])
        assert caught >= 0.8 * total, f"{harness}: {caught} of {total} labelled loops caught in their window"


def test_identical_failing_requests_are_caught_by_their_third_failure(data) -> None:
    runs, detections = data
    caught = {(d.run, d.call) for d in detections}
    for run in runs:
        streak: dict[str, tuple[str, str, int]] = {}
        for c in run.calls:
            if c.error_type is None:
                streak.pop(c.name, None)
                continue
            command = command_of(c.args)
            if command is not None and is_deliberate_wait(command):
                continue  # a poll (sleep, then look), not a request
            key = (json.dumps(c.args, sort_keys=True), c.result or "")
            last = streak.get(c.name)
            n = last[2] + 1 if last is not None and last[:2] == key else 1
            streak[c.name] = (*key, n)
            if n == 3:
                # the third identical failure in a row (other tools in between allowed)
                first = min((i for r, i in caught if r == run.id), default=None)
                assert first is not None and first <= c.index, (run.id, c.index)


def test_the_processor_makes_the_same_detections(data) -> None:
    runs, detections = data
    from bench.quality.ours import processor_available

    if not processor_available():
        pytest.skip("otel_progress.ProgressSpanProcessor is not available")
    processor = real.processor_detections(real_files(swebench=False), runs)
    assert {(d.run, d.call, d.reason) for d in processor} == {(d.run, d.call, d.reason) for d in detections}
