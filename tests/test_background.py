"""The README's test command starts the slow builds itself, in the background, before the
first test runs (issue 28, item 7: on a fresh machine it took 51 minutes, the Collector
compiled in the foreground, against 26 for ``.ci/run``, which started them first).

Each case runs a real pytest session of this repository in a subprocess, with empty cache
directories and the jobs run under a recording wrapper (``OTEL_PROGRESS_TEST_BACKGROUND_WRAPPER``)
that notes its command and sleeps instead of building; a plugin stops the session at the
first test's set-up, so nothing is built in the foreground either."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests._background import ROOT, collector_binary

pytestmark = pytest.mark.timeout(300)

E2E = "tests/e2e/test_pipeline.py::test_agent_gateway_replicas_sink_prometheus"
MATRIX = "tests/frameworks/test_matrix.py::test_setup[agno/openinference/loop]"
MATRIX_JS = "tests/frameworks_js/test_matrix.py::test_setup[ai_sdk_5/experimental-telemetry/loop]"
QUICK = "tests/test_layers.py"

RECORDER = """
import json, os, sys, time
out = os.path.join(os.environ["RECORDS"], f"{os.getpid()}.json")
with open(out + ".tmp", "w") as f:
    json.dump({"argv": sys.argv[1:], "pid": os.getpid(), "group": os.getpgid(0), "at": time.time()}, f)
os.replace(out + ".tmp", out)
time.sleep(float(os.environ.get("RECORDER_SLEEP", "60")))
"""

STOPPER = """
import json, os, time
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    logs = os.path.join(os.environ["OTEL_PROGRESS_CACHE"], "background")
    seen = sorted(n for n in os.listdir(logs) if n.endswith(".log")) if os.path.isdir(logs) else []
    with open(os.environ["FIRST_TEST"], "w") as f:
        json.dump({"nodeid": item.nodeid, "logs": seen, "at": time.time()}, f)
    pytest.exit("stopped at the first test's set-up", returncode=0)
"""


@pytest.fixture
def session(tmp_path: Path):
    """``run(cache, *args)``: a pytest session of this repository with its caches under
    ``cache``; returns its output. Afterwards, the recorders it started are stopped."""
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "stopper.py").write_text(textwrap.dedent(STOPPER))
    (tmp_path / "recorder.py").write_text(textwrap.dedent(RECORDER))
    records = tmp_path / "records"
    records.mkdir()

    def run(cache: Path, *args: str) -> str:
        cache.mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_PROGRESS_", "PYTEST_"))}
        env.update({
            "PYTHONPATH": os.pathsep.join((str(ROOT), str(tmp_path / "plugin"))),
            "OTEL_PROGRESS_CACHE": str(cache), "OTEL_PROGRESS_MATRIX_CACHE": str(cache / "frameworks"),
            "OTEL_PROGRESS_MATRIX_JS_CACHE": str(cache / "frameworks-js"),
            "OTEL_PROGRESS_TEST_BACKGROUND_WRAPPER": f"{sys.executable} {tmp_path / 'recorder.py'}",
            "RECORDS": str(records), "FIRST_TEST": str(cache / "first-test.json"),
        })
        proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "stopper", "-p", "no:cacheprovider", "-q",
                               *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    run.records = records  # type: ignore[attr-defined]
    yield run
    for record in records.glob("*.json"):
        job = json.loads(record.read_text())
        assert job["group"] != os.getpgid(0)  # (detached: a session of its own)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job["group"], signal.SIGTERM)


def _recorded(records: Path, count: int, timeout: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(list(records.glob("*.json"))) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # (and nothing more comes)
    return [json.loads(p.read_text()) for p in records.glob("*.json")]


def test_the_selected_tests_builds_start_in_the_background_before_the_first_test_once(session, tmp_path):
    if shutil.which("go") is None or shutil.which("npm") is None:
        # (CI has both, as the Collector build and the JavaScript matrix need them: there a
        # missing one is a failure, not a skip)
        (pytest.fail if os.environ.get("CI", "").strip().lower() == "true" else pytest.skip)(
            "needs Go and npm on PATH (without them these jobs are not started)")
    cache = tmp_path / "cache"
    out = session(cache, E2E, MATRIX, MATRIX_JS)
    logs = cache / "background"
    for what in ("the Collector build", "1 framework virtualenvs", "1 JavaScript framework installs (npm ci)"):
        assert f"{what} started in the background (log: {logs}/" in out, out
    first = json.loads((cache / "first-test.json").read_text())
    assert first["nodeid"] == E2E  # (the groups that wait for a build run last)
    assert first["logs"] == ["collector.log", "frameworks.log", "frameworks_js.log"]  # started before it ran
    argvs = {r["argv"][0] if r["argv"][0] == "bash" else r["argv"][3]: r["argv"] for r in _recorded(session.records, 3)}
    assert argvs["bash"] == ["bash", str(ROOT / "collector-config" / "build-collector.sh")]
    assert argvs["frameworks"] == [sys.executable, "-m", "tests._background", "frameworks",
                                   str(ROOT / "tests/frameworks/setups/agno/requirements.txt")]
    assert argvs["frameworks_js"][:4] == [sys.executable, "-m", "tests._background", "frameworks_js"]
    assert argvs["frameworks_js"][4:] == [str(ROOT / "tests/frameworks_js/setups/ai_sdk_5")]

    # Never twice: a second session while they run starts none.
    again = session(cache, E2E, MATRIX, MATRIX_JS)
    assert again.count("already under way in the background") == 3, again
    assert len(_recorded(session.records, 4, timeout=2)) == 3


def test_nothing_starts_for_tests_that_need_no_build_or_when_it_is_cached(session, tmp_path, monkeypatch):
    out = session(tmp_path / "empty", QUICK)
    assert "in the background" not in out, out
    cache = tmp_path / "built"
    monkeypatch.setenv("OTEL_PROGRESS_CACHE", str(cache))
    binary = collector_binary()
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    out = session(cache, E2E)
    assert "in the background" not in out, out
    assert _recorded(session.records, 1, timeout=2) == []
