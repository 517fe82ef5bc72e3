"""The ``otel-progress`` command line as a user runs it: a reader that leaves early, and
what ``--help`` says is read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "traces" / "agents.jsonl"

pytestmark = pytest.mark.timeout(120)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_PROGRESS_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "otel_progress.cli", *args]


def _many_detections(tmp_path: Path, copies: int = 40) -> Path:
    """The example traces, ``copies`` times over with distinct trace ids: output far
    larger than a pipe's buffer, so a reader that leaves after one line closes the pipe
    while scan is still writing."""
    text = EXAMPLE.read_text()
    lines = [line for line in text.splitlines() if line.strip()]
    import json
    import re

    ids = sorted(set(re.findall(r'"traceId":\s*"([0-9a-f]{32})"', text)))
    assert ids
    out = []
    for n in range(copies):
        for line in lines:
            for i, trace_id in enumerate(ids):
                line = line.replace(trace_id, f"{n:08x}{i:08x}" + trace_id[16:])
            out.append(line)
    path = tmp_path / "many.jsonl"
    path.write_text("\n".join(out) + "\n")
    json.loads(out[0])
    return path


def test_a_reader_that_closes_the_pipe_does_not_change_the_verdict(tmp_path):
    """Issue 19: `scan … | head -1` exited 0 or 1 at random; detections found is 1."""
    many = _many_detections(tmp_path)
    html = tmp_path / "report.html"
    for fmt in ("json", "table"):
        proc = subprocess.Popen(_cli("scan", "--format", fmt, "--html", str(html), str(many)), env=_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
        assert proc.stdout is not None
        proc.stdout.close()  # the reader left before the first line
        _out, err = proc.communicate(timeout=90)
        assert proc.returncode == 1, (fmt, err)
        assert b"Traceback" not in err and b"Broken pipe" not in err and b"BrokenPipe" not in err, err
        assert html.stat().st_size > 1000  # and the report was still written
        html.unlink()
    for _ in range(5):  # the way a user writes it
        proc = subprocess.run(["bash", "-c", f"set -o pipefail; {' '.join(_cli())} scan {many} | head -1"],
                              env=_env(), capture_output=True, text=True, timeout=90, cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        assert proc.stdout.count("\n") == 1 and '"reason"' in proc.stdout
        assert proc.stderr == ""


def test_help_says_that_logs_are_read():
    for command, needles in (("scan", ("traces and logs", "Claude Code", "Codex CLI", "docs/logs.md")),
                             ("serve", ("traces and logs", "LogsService/Export", "docs/logs.md"))):
        proc = subprocess.run(_cli(command, "--help"), env=_env(), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0
        text = " ".join(proc.stdout.split())
        for needle in needles:
            assert needle in text, (command, needle)
    top = subprocess.run(_cli("--help"), env=_env(), capture_output=True, text=True, timeout=60).stdout
    assert "OTLP/JSON traces and logs" in " ".join(top.split())
