"""``otel-progress scan`` over OTLP/JSON logs files: the golden captures of the real CLIs,
gzip, stdin, a file holding traces and logs, unreadable lines reported and skipped."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from otel_progress.scan import EXIT_CLEAN, EXIT_DETECTED, EXIT_ERROR, run_scan

from .conftest import golden


def _scan(*paths: str, fmt: str = "json") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_scan(list(paths), fmt=fmt, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("name", "reason", "level"), [
    ("codex-0.171.0-loop.jsonl", "repeat_cycle", None),
    ("codex-0.171.0-failing-edit.jsonl", "error_recurrence", None),
    ("claude-code-2.1.332-loop-details.jsonl", "frequency", "arguments"),
    ("claude-code-2.1.332-failing-command-default.jsonl", "error_recurrence", "names"),
    ("gemini-cli-0.61.0-loop.jsonl", "frequency", "arguments"),
    ("qwen-code-0.24.4-failing-edit.jsonl", "error_recurrence", "arguments"),
])
def test_loops_are_found(name: str, reason: str, level: str | None) -> None:
    code, out, err = _scan(str(golden(name)))
    assert code == EXIT_DETECTED, err
    detections = [json.loads(line) for line in out.splitlines()]
    assert detections and detections[0]["reason"] == reason
    prefix = {"codex": "codex|", "claude": "claude_code|", "gemini": "gemini_cli|", "qwen": "qwen"}[name.split("-")[0]]
    assert detections[0]["trace_id"].startswith(prefix)  # reported under the run key
    assert detections[0]["figures"].get("evidence_level") == level


@pytest.mark.parametrize("name", ["codex-0.171.0-healthy.jsonl", "claude-code-2.1.332-healthy-details.jsonl",
                                  "gemini-cli-0.61.0-healthy.jsonl", "qwen-code-0.24.4-healthy.jsonl"])
def test_healthy_runs_are_clean(name: str) -> None:
    code, out, err = _scan(str(golden(name)), fmt="table")
    assert code == EXIT_CLEAN, err
    assert out.startswith("no detections") and "log records" in out


def test_gzip_stdin_and_mixed_file(tmp_path: Path) -> None:
    logs = golden("gemini-cli-0.61.0-loop.jsonl").read_bytes()
    traces = golden("gemini-cli-0.61.0-loop.traces.jsonl").read_bytes()
    gz = tmp_path / "logs.jsonl.gz"
    gz.write_bytes(gzip.compress(logs))
    assert _scan(str(gz))[0] == EXIT_DETECTED
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(traces + logs)
    code, out, _ = _scan(str(mixed), fmt="table")
    assert code == EXIT_DETECTED
    assert "log records" in out and "gemini_cli|" in out and "group:" in out  # both paths ran
    done = subprocess.run([sys.executable, "-m", "otel_progress.cli", "scan", "-"], input=logs,
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == EXIT_DETECTED and b"frequency" in done.stdout


def test_bad_lines_are_reported_and_the_rest_read(tmp_path: Path) -> None:
    lines = golden("codex-0.171.0-loop.jsonl").read_text().splitlines()
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([lines[0], "{not json", '{"resourceLogs": 3}', *lines[1:]]) + "\n")
    code, out, err = _scan(str(path))
    assert code == EXIT_DETECTED
    assert ":2: not valid JSON" in err and ":3: resourceLogs is 3, not a list" in err
    assert "Traceback" not in err and len(out.splitlines()) == 2  # (six identical commands: turns 3 and 6)


def test_logs_nobody_reads(tmp_path: Path) -> None:
    path = tmp_path / "other.jsonl"
    record = {"eventName": "app.started", "body": {"stringValue": "hello"}}
    path.write_text(json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [record]}]}]}) + "\n")
    code, out, err = _scan(str(path))
    assert code == EXIT_CLEAN and out == ""
    assert "none of the 1 log record(s) read is an event a coding-agent reader knows" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"something": 1}\n')
    assert _scan(str(empty))[0] == EXIT_ERROR


def test_html_report_lists_log_runs(tmp_path: Path) -> None:
    html = tmp_path / "report.html"
    code = run_scan([str(golden("codex-0.171.0-loop.jsonl"))], html=str(html), stdout=io.StringIO(),
                    stderr=io.StringIO())
    assert code == EXIT_DETECTED
    text = html.read_text()
    assert "codex|" in text and "repeat_cycle" in text


def test_one_document_with_spans_and_logs(tmp_path: Path) -> None:
    logs = [json.loads(x) for x in golden("gemini-cli-0.61.0-loop.jsonl").read_text().splitlines() if x.strip()]
    traces = [json.loads(x) for x in golden("gemini-cli-0.61.0-loop.traces.jsonl").read_text().splitlines()
              if x.strip()]
    both = {"resourceLogs": [rl for d in logs for rl in d["resourceLogs"]],
            "resourceSpans": [rs for d in traces for rs in d["resourceSpans"]]}
    path = tmp_path / "both.json"
    path.write_text(json.dumps(both, indent=1))  # one pretty-printed document
    code, out, err = _scan(str(path), fmt="table")
    assert code == EXIT_DETECTED, err
    assert "gemini_cli|" in out and "group:" in out and "log records" in out
