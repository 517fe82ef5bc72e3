"""``otel-progress demo`` and the runnable examples, as a user runs them."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from otel_progress.otlp_json import iter_documents, open_input, spans_from_request

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
    assert "healthy runs left alone: 2 of 2" in text
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
