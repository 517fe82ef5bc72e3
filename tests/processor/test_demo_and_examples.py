"""``otel-progress demo`` and the runnable examples, as a user runs them."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from otel_progress.otlp.files import iter_documents, open_input, spans_from_request

from .conftest import ROOT, run_script

EXPECTED = {"deploy-agent": False, "docs-agent": True, "fixer-agent": True, "planner-1": True,
            "planner-2": True, "research-agent": False}


def _cli() -> list[str]:
    exe = shutil.which("otel-progress", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "otel_progress.cli"]


def _spans(path: Path) -> list[object]:
    stream, _ = open_input(str(path))
    out = []
    with stream:
        for item in iter_documents(stream, str(path)):
            if isinstance(item, tuple):
                out.extend(spans_from_request(item[1]))
    return out


def test_demo_prints_detections_and_writes_otlp_json(tmp_path: Path) -> None:
    out_file = tmp_path / "demo.jsonl"
    proc = run_script([*_cli(), "demo", "--output", str(out_file)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for agent, looping in EXPECTED.items():
        block = text.split(f"\n{agent} ", 1)[1] if f"\n{agent} " in text else text.split(f"{agent} ", 1)[1]
        verdict = block.splitlines()[1]
        assert ("DETECTED" in verdict) == looping, (agent, verdict)
    assert "nudge:" in text and "handoff note" in text
    assert "livelock reason=signature_repeat" in text and "scope=run" in text
    assert "healthy agents left alone: 2 of 2" in text
    assert "progress.detections{" in text
    assert "unexpected outcome" not in text

    # the file holds the annotated spans, and scan finds the same detections again
    spans = _spans(out_file)
    annotated = [s for s in spans if any(name in ("no_progress", "livelock") for name, _ in s.events)]
    assert annotated
    # with the settings the demo used (written beside the traces, as its printed command passes them)
    scan = run_script([*_cli(), "scan", "--config", str(tmp_path / "demo.config.json"), str(out_file)], cwd=tmp_path)
    assert scan.returncode == 1, scan.stderr
    found = [json.loads(line) for line in scan.stdout.splitlines()]
    demo_ids = set(re.findall(r"on span '[^']*' ([0-9a-f]{16})", text))
    assert {d["span_id"] for d in found} == demo_ids
    for det in found:  # each detection's span carries its event in the exported file
        span = next(s for s in spans if s.span_id == det["span_id"])
        assert (det["event"], det["turn"]) in [(n, a.get("progress.turn")) for n, a in span.events]


def test_demo_agrees_with_its_scan_and_leaves_the_current_directory_alone(tmp_path: Path) -> None:
    """Issue 19: the demo counted 6 runs where its reproducing scan said 10 runs in 6 traces,
    showed tool=unknown for a run-scope detection, WASTED TURNS 0 for a run detected at turn
    3 of 4 and `[seed 000]` labels, and wrote its files into the current directory."""
    cwd = tmp_path / "checkout"
    cwd.mkdir()
    cache = tmp_path / "cache"
    proc = run_script([*_cli(), "demo"], cwd=cwd, env={"OTEL_PROGRESS_CACHE": str(cache)})
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert list(cwd.iterdir()) == []  # nothing lands in the checkout
    out_file = cache / "demo" / "otel-progress-demo.jsonl"
    assert out_file.exists() and (cache / "demo" / "otel-progress-demo.config.json").exists()
    assert f"spans written to {out_file}" in text
    assert "[seed" not in text and "seed 0" not in text
    assert "tool=unknown" not in text
    assert "progress.detections{reason=signature_repeat,level=1,agent=planner-2} 1" in text
    assert "progress.wasted.turns{agent=planner-2} 1" in text
    assert "(5 runs: planner-2, and extractor-2 invoked 4 times)" in text
    runs, traces = re.search(r"detections in \d+ of (\d+) traces \((\d+) runs", text).groups()[::-1]

    command = text.split("this reproduces the detections above:\n", 1)[1].splitlines()[0].strip()
    assert command.startswith("otel-progress scan ")
    scan = run_script([*_cli(), *command.split()[1:]], cwd=cwd)
    assert scan.returncode == 1, scan.stderr
    summary = re.search(r"Runs: (\d+) \((\d+) with detections\) in (\d+) traces", scan.stdout)
    assert summary is not None and (summary.group(1), summary.group(3)) == (runs, traces) == ("10", "6")
    rows = [line.split() for line in scan.stdout.split("\nRuns:")[1].splitlines()[2:]]
    extractor = [row for row in rows if row[2] == "extractor-2"]
    assert len(extractor) == 4 and len({row[1] for row in extractor}) == 4  # four runs, told apart by RUN
    planner = next(row for row in rows if row[2] == "planner-2")
    turns, first, wasted = int(planner[3]), int(planner[6]), int(planner[7])
    assert (turns, first, wasted) == (4, 3, 1)  # detected at turn 3 of 4: one turn wasted
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("script,expect", [
    ("examples/harness/harness.py", "level 3: parked for human review"),
    ("examples/manual_sdk/agent.py", "spans written to"),
])
def test_examples_run(script: str, expect: str, tmp_path: Path) -> None:
    args = [sys.executable, str(ROOT / script)]
    if "manual_sdk" in script:
        args.append(str(tmp_path / "spans.jsonl"))
    proc = run_script(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert expect in proc.stdout
    if "manual_sdk" in script:
        spans = _spans(tmp_path / "spans.jsonl")
        flagged = sorted(s.name for s in spans if s.events)
        assert flagged == ["execute_tool get_shipment", "execute_tool get_shipment",
                           "invoke_agent support-agent"]
