"""Fixtures of the end-to-end test: the Collector built from collector-config/builder.yaml
and Prometheus from Debian's package (the fixtures of tests/collector/conftest.py, which
build once and cache, skip without Go except under CI=true, and apt-install prometheus
when missing and root), and a process group that is always cleaned up."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from tests.collector.conftest import in_ci, otelcol_binary, promtool  # noqa: F401 - fixtures re-exported

REPO = Path(__file__).resolve().parents[2]


class Procs:
    """Processes started by a test: started with logs to files, stopped (TERM, then KILL)
    at the end, each by its own pid."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
              cwd: Path | None = None) -> subprocess.Popen[bytes]:
        log = open(self.logdir / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        full_env = {**os.environ, **(env or {})}
        proc = subprocess.Popen(list(argv), env=full_env, cwd=cwd or REPO, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        log.close()
        self.procs[name] = proc
        return proc

    def log(self, name: str, tail: int = 60) -> str:
        path = self.logdir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-tail:])

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        proc.send_signal(sig)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(10)

    def stop_all(self) -> None:
        for name in reversed(list(self.procs)):
            self.stop(name, timeout=10)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    p = Procs(tmp_path)
    yield p
    p.stop_all()


@pytest.fixture(scope="session")
def prometheus_binary(promtool: str) -> str:  # noqa: F811 - the fixture above
    """Debian's prometheus server (same package as promtool)."""
    found = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not os.access(found, os.X_OK):
        msg = "the prometheus server binary is missing although promtool is installed (apt-get install prometheus)"
        if in_ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return found


def start_prometheus(procs: Procs, binary: str, workdir: Path, sink_port: int, port: int) -> None:
    """A real Prometheus on 127.0.0.1:``port`` with the shipped rules
    (collector-config/alerting/prometheus-rules.yaml), scraping the sink's /metrics on
    ``sink_port`` as job otel-progress-sink and evaluating every second."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {REPO / 'collector-config' / 'alerting' / 'prometheus-rules.yaml'}\n"
        "scrape_configs:\n  - job_name: otel-progress-sink\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{sink_port}']\n")
    procs.start("prometheus", [binary, f"--config.file={workdir / 'prometheus.yml'}",
                               f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}"])

