"""``scan``'s progress bar on compressed input, and its exit status when detections and
unreadable input come together (issue 28, items 3 and 4)."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from otel_progress import scan
from tests.otlp_builder import TraceBuilder, example_traces, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
_DRAWN = re.compile(r"scanning \[[# ]*\]\s+([\d.]+)%\s+(\d+) spans")


def _gzip_of_traces(path: Path, traces: int, calls: int) -> int:
    """A gzip file of ``traces`` lines, each a trace of ``calls`` tool calls with results
    that compress like real ones (a few times, not a hundred); returns the spans written."""
    seed = 0
    buf = io.StringIO()
    for t in range(traces):
        b = TraceBuilder(f"t{t}", f"agent-{t % 5}")
        for _ in range(calls):
            seed += 1
            rows = [{"id": f"{seed}-{k}", "v": os.urandom(24).hex()} for k in range(8)]
            b.tool("lookup", {"id": seed}, json.dumps({"rows": rows}))
        write_jsonl([b], buf)
    path.write_bytes(gzip.compress(buf.getvalue().encode(), compresslevel=6))
    return traces * (calls + 1)


@pytest.mark.timeout(180)
def test_progress_on_gzip_input_tracks_the_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gz = tmp_path / "archive.jsonl.gz"
    spans = _gzip_of_traces(gz, traces=600, calls=12)
    assert gz.stat().st_size > 2 << 20  # (large beside the decompressor's read-ahead)
    monkeypatch.setattr(scan._Progress, "every_s", 0.0)  # draw after every document
    err = io.StringIO()
    result = scan.scan_paths([str(gz)], progress=True, stderr=err)
    assert result.spans == spans and not result.problems
    drawn = [(float(p) / 100, int(n)) for p, n in _DRAWN.findall(err.getvalue())]
    assert len(drawn) > 500
    # the share shown is the share of the spans read, within the read-ahead of the decompressor
    worst = max(abs(frac - n / spans) for frac, n in drawn)
    assert worst < 0.08, [(f, round(n / spans, 3)) for f, n in drawn if abs(f - n / spans) >= 0.08][:5]
    assert drawn[-1] == (1.0, spans)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otel_progress.cli", "scan", *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_detections_with_unreadable_input_have_their_own_status(tmp_path: Path) -> None:
    """Exit status 4: detections found, and some input could not be read; 1 and 2 keep
    their meaning when only one of the two happened."""
    buf = io.StringIO()
    write_jsonl(example_traces(), buf)
    good = tmp_path / "agents.jsonl"
    good.write_text(buf.getvalue())
    truncated = tmp_path / "cut.jsonl.gz"
    whole = gzip.compress(buf.getvalue().encode())
    truncated.write_bytes(whole[: len(whole) * 2 // 3])  # an archive cut short: read up to the cut
    missing = tmp_path / "missing.jsonl"
    alone = _cli(str(good))
    assert alone.returncode == 1, alone.stderr
    detections = alone.stdout.splitlines()
    assert detections
    for other in (missing, truncated):
        proc = _cli(str(good), str(other))
        assert proc.returncode == 4, (other, proc.returncode, proc.stderr)
        assert proc.stdout.splitlines()[: len(detections)] == detections  # (nothing lost)
        assert str(other) in proc.stderr and "Traceback" not in proc.stderr
    proc = _cli(str(missing))
    assert proc.returncode == 2 and "cannot open" in proc.stderr and not proc.stdout
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert _cli(str(empty), str(good), "--format", "table").returncode == 4
