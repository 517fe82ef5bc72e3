"""The detection-quality gate (``python -m bench.quality.gate``) passes with the shipped
floors (``bench/quality/floors.yaml``) and fails a worse detector, so that it can fail.

Reads ``../shared/realtraces`` (skips with a message when absent; the project never ships
those runs)."""

from __future__ import annotations

import pytest

from bench.quality import gate
from bench.quality.realruns import REAL_DIR, real_files
from otel_progress import Config


@pytest.fixture(scope="module")
def files():
    found = real_files()
    if not found:
        pytest.skip(f"no real runs at {REAL_DIR} (they are not part of the project)")
    return found


def test_floors_name_known_figures_and_every_source_with_labels(files) -> None:
    floors = gate.load_floors()
    assert floors and all(set(limits) <= set(gate.FIGURES) for limits in floors.values())
    assert "openhands-codeact-swebench" in floors


def test_the_engine_passes_the_shipped_floors(files) -> None:
    checks = gate.check(gate.compute(files=files), gate.load_floors())
    failed = [str(c) for c in checks if not c.ok]
    assert checks and not failed, "\n".join(failed)


def test_a_worse_detector_fails_the_gate(files) -> None:
    worse = Config(disabled_signals=frozenset({"same_answer", "frequency"}))
    checks = gate.check(gate.compute(worse, files=files), gate.load_floors())
    assert [c for c in checks if not c.ok], "the gate passes a detector without same_answer and frequency"


def test_a_missing_source_fails(files) -> None:
    checks = gate.check([], {"no-such-source": {"loops_caught_min": 0.5}})
    assert [c.ok for c in checks] == [False] and "absent" in str(checks[0])


def test_gate_skips_without_the_real_runs(monkeypatch, capsys) -> None:
    monkeypatch.setattr(gate, "real_files", lambda: [])
    assert gate.main([]) == 0
    assert "skipped" in capsys.readouterr().out


def test_swebench_labels_name_known_runs_and_calls(files) -> None:
    from bench.quality import labels as lab
    from bench.quality.realruns import load_real_runs

    swebench = [f for f in files if f.parent.name == "swebench"]
    if not swebench or not lab.SWEBV_SHARED_LABELS.is_file():
        pytest.skip("the SWE-bench half or its shared labels are absent")
    length = {r.id: len(r.calls) for r in load_real_runs(swebench)}
    labels = lab.load_swebv_labels()
    labelled = [e["run"] for key in ("loops", "no_loop") for e in labels[key]]
    assert len(labelled) == len(set(labelled)) == 13 + 44, "a run labelled twice, or a label file not read"
    for entry in labels["loops"]:
        first, last = entry["window"]
        assert 1 <= first <= last <= length[entry["run"]], entry
    for entry in labels["no_loop"]:
        assert entry["run"] in length, entry
    for entry in labels["detections"]:
        assert 1 <= entry["call"] <= length[entry["run"]], entry
        assert entry["verdict"] in ("real_loop", "false_alarm", "borderline"), entry
