"""``otel-progress scan`` end to end: the console script on real files, in a subprocess."""

from __future__ import annotations

import base64
import gzip
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from otel_progress.cli import main
from tests.otlp_builder import TraceBuilder, example_traces, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "traces" / "agents.jsonl"


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otel_progress.cli", *args], input=stdin.decode() if stdin else None,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def _write(path: Path, traces: list[TraceBuilder]) -> Path:
    buf = io.StringIO()
    write_jsonl(traces, buf)
    path.write_text(buf.getvalue())
    return path


def test_shipped_example_is_current() -> None:
    buf = io.StringIO()
    write_jsonl(example_traces(), buf)
    assert EXAMPLE.read_text() == buf.getvalue(), "regenerate: python -m tests.otlp_builder > " + str(EXAMPLE)


def test_example_json_lines_and_exit_status() -> None:
    proc = _cli("scan", str(EXAMPLE))
    assert proc.returncode == 1, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    by_agent = {(r["agent"], r["reason"], r["turn"], r["level"]) for r in rows}
    assert ("docs-agent", "barren", 4, 1) in by_agent
    assert ("support-agent", "repeat_cycle", 4, 1) in by_agent
    assert ("fixer-agent", "signature_repeat", 3, 1) in by_agent
    assert not any(r["agent"] in ("deploy-agent", "reader-agent") for r in rows)
    for r in rows:
        assert len(r["trace_id"]) == 32 and len(r["span_id"]) == 16
        assert r["event"] in ("no_progress", "livelock")
        assert {"figures", "nudge", "handoff", "scope", "level", "turn", "reason"} <= r.keys()
        # annotations never carry raw arguments or results
        assert "refund" not in json.dumps(r) and "shipped" not in json.dumps(r)


def test_detection_sits_on_the_span_that_completed_the_loop() -> None:
    docs = TraceBuilder("docs", "docs-agent")
    spans = [docs.tool("search_docs", {"q": f"q{i}"}, "0 results") for i in range(4)]
    out = io.StringIO()
    write_jsonl([docs], out)
    proc = _cli("scan", "-", stdin=out.getvalue().encode())
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["span_id"] for r in rows] == [spans[3]]


def test_table_has_detections_and_per_run_summary() -> None:
    proc = _cli("scan", "--format", "table", str(EXAMPLE))
    assert proc.returncode == 1
    assert "REASON" in proc.stdout and "WASTED TOKENS" in proc.stdout
    assert "Runs: 5 (3 with detections) in 5 traces" in proc.stdout
    fixer = next(line for line in proc.stdout.splitlines() if line.startswith("17e1") and "fixer-agent" in line
                 and "livelock" not in line)
    assert fixer.split()[-2:] == ["3", "18000"]  # wasted turns and tokens after turn 3


def test_healthy_input_exits_zero_with_no_output(tmp_path: Path) -> None:
    healthy = [t for t in example_traces() if t.name.endswith("healthy")]
    proc = _cli("scan", str(_write(tmp_path / "ok.jsonl", healthy)))
    assert proc.returncode == 0 and proc.stdout == ""


def test_corrupt_line_is_reported_and_the_rest_scanned(tmp_path: Path) -> None:
    lines = EXAMPLE.read_text().splitlines()
    lines.insert(1, '{"resourceSpans": [ broken')
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    proc = _cli("scan", str(path))
    assert proc.returncode == 1
    assert f"{path}:2: not valid JSON" in proc.stderr
    assert len(proc.stdout.splitlines()) == len(_cli("scan", str(EXAMPLE)).stdout.splitlines())


def test_gzip_stdin_and_single_document(tmp_path: Path) -> None:
    gz = tmp_path / "agents.jsonl.gz"
    gz.write_bytes(gzip.compress(EXAMPLE.read_bytes()))
    expected = _cli("scan", str(EXAMPLE)).stdout
    assert _cli("scan", str(gz)).stdout == expected
    assert _cli("scan", "-", stdin=EXAMPLE.read_bytes()).stdout == expected
    first = json.loads(EXAMPLE.read_text().splitlines()[0])
    pretty = tmp_path / "one.json"
    pretty.write_text(json.dumps(first, indent=2))
    proc = _cli("scan", str(pretty))
    assert proc.returncode == 1 and '"docs-agent"' in proc.stdout


def test_base64_ids_are_read_as_hex(tmp_path: Path) -> None:
    doc = json.loads(EXAMPLE.read_text().splitlines()[0])
    for span in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for key in ("traceId", "spanId", "parentSpanId"):
            if span.get(key):
                span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    path = tmp_path / "b64.json"
    path.write_text(json.dumps(doc))
    rows = [json.loads(line) for line in _cli("scan", str(path)).stdout.splitlines()]
    assert rows and rows[0]["trace_id"] == "cbc4ffb602d182e338b6463b883370ce"


@pytest.mark.parametrize("content", ["", "not json at all\n", '{"hello": "world"}\n'])
def test_input_without_trace_data_is_an_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    proc = _cli("scan", str(path))
    assert proc.returncode == 2
    assert str(path) in proc.stderr


def test_missing_file_and_bad_usage_exit_two(tmp_path: Path) -> None:
    proc = _cli("scan", str(tmp_path / "nope.jsonl"))
    assert proc.returncode == 2 and "cannot open" in proc.stderr
    assert _cli("scan").returncode == 2
    assert _cli("scan", "--format", "xml", str(EXAMPLE)).returncode == 2


def test_config_file_with_manifest(tmp_path: Path) -> None:
    deploy = TraceBuilder("deploy", "deploy-agent")
    for status in ("running", "success", "success"):
        deploy.tool("get_build_status", {"build_id": "b1"}, json.dumps({"status": status}), gap=30)
    traces = _write(tmp_path / "d.jsonl", [deploy])
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps([{"name": "get_build_status", "kind": "wait", "progress_field": "status",
                                     "waiting_values": ["running"], "terminal_values": ["success"]}]))
    rows = [json.loads(x) for x in _cli("scan", "--config", str(manifest), str(traces)).stdout.splitlines()]
    assert [(r["reason"], r["turn"]) for r in rows] == [("poll_after_terminal", 3)]
    settings = tmp_path / "settings.yaml"
    settings.write_text("window: 4\nmanifest_file: " + str(manifest) + "\n")
    rows = [json.loads(x) for x in _cli("scan", "--config", str(settings), str(traces)).stdout.splitlines()]
    assert [r["reason"] for r in rows] == ["poll_after_terminal"]


def test_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"windw": 4}')
    proc = _cli("scan", "--config", str(bad), str(EXAMPLE))
    assert proc.returncode == 2 and "unknown key 'windw'" in proc.stderr
    bad.write_text('[{"name": "x", "kind": "wait", "waiting_values": ["a"]}]')
    proc = _cli("scan", "--config", str(bad), str(EXAMPLE))
    assert proc.returncode == 2 and "terminal_values" in proc.stderr


def test_progress_bar_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", "--progress", "--format", "table", str(EXAMPLE)]) == 1
    assert "scanning [" in capsys.readouterr().err


@pytest.mark.parametrize("convention", ["genai", "openinference", "openllmetry"])
def test_three_span_conventions_give_the_same_detections(tmp_path: Path, convention: str) -> None:
    t = TraceBuilder("conv", "agent-x", convention=convention)
    for _ in range(3):
        t.chat(500)
        t.tool("get_order", {"id": 1, "full": True}, '{"status": "shipped"}')
        t.chat(500)
        t.tool("get_shipment", {"id": 1}, '{"eta": "Friday"}')
    rows = [json.loads(x) for x in _cli("scan", str(_write(tmp_path / "c.jsonl", [t]))).stdout.splitlines()]
    assert [(r["reason"], r["turn"], r["agent"]) for r in rows] == [("repeat_cycle", 4, "agent-x")]
    assert rows[0]["tokens"] == 2000


def test_nested_mcp_span_counts_once(tmp_path: Path) -> None:
    t = TraceBuilder("mcp", "agent-m")
    for i in range(3):
        outer = t.tool("search", {"q": f"q{i}"}, f"hit {i}")
        t.spans.append({**t.spans[-1], "spanId": f"{i:016x}", "parentSpanId": outer, "name": "tools/call search",
                        "attributes": [{"key": "mcp.method.name", "value": {"stringValue": "tools/call"}},
                                       {"key": "gen_ai.tool.name", "value": {"stringValue": "search"}}]})
    proc = _cli("scan", "--format", "table", str(_write(tmp_path / "m.jsonl", [t])))
    assert proc.returncode == 0
    assert "agent-m" in proc.stdout and "     3 " in proc.stdout  # three turns, not six
