"""Every summary counts the same thing, and the demo's read-back command reproduces it.

The per-run counts of ``--format table``, the JSON lines and the HTML report all count
the detections reported (both scopes; nothing past level 3), on traces that have both
a loop that runs past level 3 and run-scope (cross-agent) detections: the demo's.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.otlp_builder import TraceBuilder, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "otel_progress.cli"]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=180, cwd=cwd)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("demo")
    proc = _run([*CLI, "demo", "-o", str(root / "demo.jsonl")], root)
    assert proc.returncode == 0, proc.stderr
    return root, proc.stdout


def _demo_detections(text: str) -> Counter[tuple[str, int, str, int]]:
    """(span, turn, reason, level) of each detection the demo printed."""
    found = re.findall(r"turn (\d+): \w+ reason=(\w+) level=(\d) .*\n\s+on span '[^']*' ([0-9a-f]{16})", text)
    return Counter((span, int(turn), reason, int(level)) for turn, reason, level, span in found)


def _table_detections(text: str) -> Counter[tuple[str, int, str, int]]:
    rows = text.split("\n\nRuns:")[0].splitlines()[1:]
    out: Counter[tuple[str, int, str, int]] = Counter()
    for row in rows:
        _trace, span, _agent, turn, level, _action, _event, reason, *_ = row.split()
        out[(span, int(turn), reason, int(level))] += 1
    return out


def _table_runs(text: str) -> tuple[str, Counter[tuple[str, str, int]]]:
    summary = text.split("\n\nRuns:")[1]
    header, rows = summary.splitlines()[0], summary.splitlines()[2:]
    return header, Counter((r.split()[0], r.split()[2], int(r.split()[5])) for r in rows)  # TRACE RUN AGENT ...


def test_the_demo_prints_a_command_that_reproduces_it(demo: tuple[Path, str]) -> None:
    root, text = demo
    command = text.split("this reproduces the detections above:\n", 1)[1].splitlines()[0].strip()
    argv = shlex.split(command)
    assert argv[:2] == ["otel-progress", "scan"] and "--config" in argv
    proc = _run([*CLI, *argv[1:]], root)
    assert proc.returncode == 1, proc.stderr
    expected = _demo_detections(text)
    assert sum(expected.values()) == int(re.search(r"(\d+) detections in", text).group(1))
    assert _table_detections(proc.stdout) == expected
    assert (root / "demo.config.json").exists()  # written beside the traces


def test_table_json_and_html_count_the_same_detections(demo: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = demo
    long_loop = TraceBuilder("long-loop", "looper")
    for _ in range(40):  # runs past level 3: later findings are not reported, nor counted
        long_loop.chat(100)
        long_loop.tool("search_docs", {"q": "same"}, "0 results")
    buf = io.StringIO()
    write_jsonl([long_loop], buf)
    loop_file = tmp_path / "loop.jsonl"
    loop_file.write_text(buf.getvalue())
    inputs = ["--config", str(root / "demo.config.json"), str(root / "demo.jsonl"), str(loop_file)]
    report = tmp_path / "r.html"
    as_json = _run([*CLI, "scan", "--html", str(report), *inputs], tmp_path)
    as_table = _run([*CLI, "scan", "--format", "table", *inputs], tmp_path)
    assert as_json.returncode == as_table.returncode == 1, as_json.stderr + as_table.stderr

    lines = [json.loads(x) for x in as_json.stdout.splitlines()]
    assert any(d["scope"] == "run" for d in lines) and any(d["level"] == 3 for d in lines)
    agents = {}  # (trace, run) -> agent, from the HTML rows
    data = json.loads(report.read_text().split('<script id="report-data" type="application/json">')[1]
                      .split("</script>")[0])
    html_counts = Counter()
    for r in data["runs"]:
        agents[(r["trace"], r["run"])] = r["agent"]
        if r["n"]:
            html_counts[(r["trace"], r["agent"], r["n"])] += 1
    per_run = Counter((d["trace_id"], d["run_id"]) for d in lines)
    json_counts = Counter((trace, agents[(trace, run)], n) for (trace, run), n in per_run.items())
    header, table_runs = _table_runs(as_table.stdout)
    table_counts = Counter({k: v for k, v in table_runs.items() if k[2]})
    assert json_counts == html_counts == table_counts
    total = sum(k[2] * v for k, v in table_counts.items())
    assert total == len(lines) == sum(_table_detections(as_table.stdout).values())
    runs_with = int(re.match(r" (\d+) \((\d+) with detections\)", header).group(2))
    assert runs_with == len(per_run) == sum(1 for r in data["runs"] if r["n"])
    cards = dict((label, value) for value, label in re.findall(
        r'<div class="card"><b>([^<]+)</b><span>([^<]+)</span>', report.read_text()))
    assert int(cards["detections"]) == len(lines) and int(cards["runs with detections"]) == runs_with


def test_demo_settings_file_round_trips(tmp_path: Path) -> None:
    from otel_progress.demo import DEMO_MANIFEST, write_settings
    from otel_progress.engine.config import Config
    from otel_progress.engine.manifest import parse_manifest

    config = Config(window=12, disabled_signals=frozenset({"barren"}), volatile_keys=frozenset({"ts", "Request-Id"}),
                    implicit_waits=False, implicit_max_wait_seconds=60.5, digest_key="secret",
                    manifest=parse_manifest(DEMO_MANIFEST, "demo"))
    path = tmp_path / "s.json"
    write_settings(config, str(path))
    assert "secret" not in path.read_text()  # never the digest key
    assert Config.from_file(path) == config.replace(digest_key=None)
