"""The HTML run report: self-contained, and what renders in headless Chromium.

Chromium is Debian's ``chromium`` package. When it is missing the test installs it with
apt-get if it runs as root; otherwise it is skipped with a message, except under CI=true,
where a missing browser fails the test.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from bench.quality.corpus import load_corpus, make_run
from bench.quality.otlp import write_traces
from otel_progress.scan import run_scan, scan_paths
from otel_progress.scan.report import write_html

CI = os.environ.get("CI", "").lower() == "true"


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update"], capture_output=True, env=env, check=False, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
                       capture_output=True, env=env, check=False, timeout=900)
        path = shutil.which("chromium")
        if path:
            return path
    message = "headless Chromium is needed: install Debian's 'chromium' package (apt-get install chromium)"
    if CI:
        pytest.fail(message)
    pytest.skip(message + "; not root, so it was not installed")


@pytest.fixture(scope="module")
def chromium() -> str:
    return _chromium()


def _browse(chromium: str, url: str, *args: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--no-first-run", f"--user-data-dir={profile}",
               "--virtual-time-budget=5000", *args, url]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # what rendered, without the report's own script and data (they contain the same markup)
    return re.sub(r"<script\b.*?</script>", "", proc.stdout, flags=re.S)


@pytest.fixture(scope="module")
def corpus_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    root = tmp_path_factory.mktemp("report")
    runs = load_corpus()
    write_traces(runs, "genai", root / "traces")
    paths = sorted(str(p) for p in (root / "traces").glob("*.json"))
    result = scan_paths(paths)
    out = root / "report.html"
    write_html(result, str(out), sources=paths)
    return out, runs


def test_report_is_self_contained(corpus_report) -> None:
    path, _ = corpus_report
    text = path.read_text(encoding="utf-8")
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    assert not re.search(r"<(?:script|img|link|iframe)[^>]+(?:src|href)=", text)
    assert not re.search(r"url\(|@import", text)
    assert "http://" not in text.split('<script id="report-data"')[0]


def test_report_renders_in_chromium(chromium: str, corpus_report) -> None:
    path, runs = corpus_report
    dom = _browse(chromium, path.as_uri() + "#open=3", "--dump-dom")
    assert 'data-ready="1"' in dom, "the report's script did not run"
    assert "<svg" in dom
    rows = re.findall(r'<tr class="run[^"]*" data-i="(\d+)"', dom)
    # one row per agent run: the corpus runs plus their sub-agent invocations
    assert len(rows) == sum(len(r.invocations()) for r in runs)
    assert dom.count('<svg class="timeline"') == 3
    first_timeline = dom.split('<svg class="timeline"')[1].split("</svg>")[0]
    assert first_timeline.count('<rect class="call') >= 5
    assert '<g class="flag" data-reason="' in first_timeline
    assert '<polygon class="tokens"' in first_timeline
    assert "Progress watchdog notice" in first_timeline  # the nudge, on hover
    # the summary comes first, sorted by wasted tokens
    wasted = [int(x.replace(",", "")) for x in re.findall(r'<td class="num">([\d,]+)</td></tr>', dom)]
    assert wasted == sorted(wasted, reverse=True) and wasted[0] > 0


def test_report_marks_errors_and_opens_a_trace(chromium: str, tmp_path: Path) -> None:
    run = make_run("errors", [{"call": "fetch_user", "args": {"id": i}, "error": {"type": "HTTPError",
                                                                                  "message": "404 Not Found"}}
                              for i in range(7)])
    traces = write_traces([run], "genai", tmp_path)
    path = str(tmp_path / "errors.json")
    out = tmp_path / "r.html"
    write_html(scan_paths([path]), str(out), sources=[path])
    dom = _browse(chromium, out.as_uri() + "#open=" + traces["errors"].trace_id, "--dump-dom")
    assert dom.count('<rect class="call err"') == 7
    assert '<g class="flag" data-reason=' in dom


def test_thousands_of_runs_stay_usable(chromium: str, tmp_path: Path) -> None:
    base = [{"call": "search", "args": {"q": "x"}, "result": "0 results"}] * 3 + [
        {"call": "read", "args": {"p": "a"}, "result": "A"}]
    runs = [make_run(f"r{i}", base if i % 3 else base[:1]) for i in range(2000)]
    write_traces(runs, "genai", tmp_path / "t")
    files = sorted(str(p) for p in (tmp_path / "t").glob("*.json"))
    bundle = tmp_path / "all.jsonl"
    with open(bundle, "w", encoding="utf-8") as fh:
        for f in files:
            fh.write(Path(f).read_text(encoding="utf-8"))
    out = tmp_path / "big.html"
    write_html(scan_paths([str(bundle)]), str(out), sources=[str(bundle)])
    assert out.stat().st_size < 8 * 1024 * 1024
    dom = _browse(chromium, out.as_uri(), "--dump-dom")
    assert dom.count('<tr class="run"') == 200  # the first page only; timelines on demand
    assert "200 of 2000 runs shown" in dom
    assert '<svg class="timeline"' not in dom


def test_scan_command_writes_the_report(tmp_path: Path) -> None:
    runs = load_corpus(only=["s-seed002-two-call-cycle", "h-seed002-retry-after-timeout"])
    write_traces(runs, "genai", tmp_path)
    out = tmp_path / "scan.html"
    paths = [str(tmp_path / f"{r.id}.json") for r in runs]
    status = run_scan(paths, html=str(out), stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))  # noqa: SIM115
    assert status == 1
    text = out.read_text(encoding="utf-8")
    assert '"reasons":["repeat_cycle"]' in text
    assert text.count('"trace":') == 2


def test_screenshot(chromium: str, corpus_report, tmp_path: Path) -> None:
    path, _ = corpus_report
    shot = tmp_path / "shot.png"
    _browse(chromium, path.as_uri() + "#open=2", f"--screenshot={shot}", "--window-size=1280,1000",
            "--hide-scrollbars")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000
