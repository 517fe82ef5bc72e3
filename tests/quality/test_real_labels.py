"""The hand labels of detections on the real runs stay true as the engine changes.

Reads ``../shared/realtraces/*.jsonl.gz`` (skips with a message when absent; the project
never ships those runs) and runs ``otel-progress scan`` over them with the defaults. Fails
when a labelled false alarm fires again, a labelled real loop is no longer caught, a
detection has no label (label it in ``bench/quality/real_labels.yaml``), or the targets of
issue 11 are missed: at least 90% of detections real loops, at most 3% of passing runs
flagged, every identical failing request sent three times in a row caught by its third
failure (commands that sleep first are polls, as in the engine).
"""

from __future__ import annotations

import json
from functools import cache

import pytest

from bench.quality import real
from bench.quality.realruns import REAL_DIR, RealRun, load_real_runs, real_files
from otel_progress.content import command_of, is_deliberate_wait


@cache
def _data() -> tuple[list[RealRun], list[real.RealDetection]]:
    files = real_files()
    runs = load_real_runs(files)
    return runs, real.scan_detections(files, runs)


@pytest.fixture(scope="module")
def data() -> tuple[list[RealRun], list[real.RealDetection]]:
    if not real_files():
        pytest.skip(f"no real runs at {REAL_DIR} (they are not part of the project)")
    return _data()


def test_labels_name_known_runs_and_calls(data) -> None:
    runs, _ = data
    by_id = {r.id: r for r in runs}
    labels = real.load_labels()
    for entry in labels["detections"]:
        assert entry["verdict"] in ("real_loop", "false_alarm"), entry
        assert entry["run"] in by_id, entry["run"]
        assert 1 <= int(entry["call"]) <= len(by_id[entry["run"]].calls), entry
        assert entry["why"].strip()
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
    first: dict[str, int] = {}
    for d in detections:
        first[d.run] = min(first.get(d.run, d.call), d.call)
    for entry in real.load_labels()["detections"]:
        if entry["verdict"] == "real_loop":
            assert first.get(entry["run"], 10**9) <= int(entry["call"]), f"no longer caught: {entry}"


def test_quality_targets_on_real_runs(data) -> None:
    runs, detections = data
    sorted_labels = real.labelled(detections, real.load_labels())
    assert detections, "no detection at all on the real runs"
    assert len(sorted_labels["real_loop"]) >= 0.9 * len(detections)
    passing = [r for r in runs if r.passed]
    flagged = {d.run for d in detections}
    assert sum(r.id in flagged for r in passing) <= 0.03 * len(passing)
    # no labelled missed loop among the sampled long failing runs without a detection
    assert not [e for e in real.load_labels()["no_detection"] if e["verdict"] == "missed_loop"]


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
