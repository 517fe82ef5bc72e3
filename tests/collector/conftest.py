"""Fixtures for the OpenTelemetry Collector side of otel-progress (collector-config/).

These tests need no otel_progress import.  They need:
  * Go (>= 1.26) to build the Collector with collector-config/build-collector.sh
    (cached under ${OTEL_PROGRESS_CACHE:-~/.cache/otel-progress}; the first build
    takes minutes).  Without Go the Collector tests are skipped, except with
    CI=true, where a missing Go is a failure.
  * promtool, from Debian's `prometheus` package; installed on demand when running
    as root (or in CI), otherwise the alert-rule tests are skipped.
  * grpcio and opentelemetry-proto for the smoke tests' OTLP client; pip-installed
    into the running interpreter if missing.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO / "collector-config"
BUILD_SCRIPT = CONFIG_DIR / "build-collector.sh"
BUILD_TIMEOUT_S = 45 * 60  # the first build on 2 cores takes a few minutes; be generous


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(scope="session")
def config_dir() -> Path:
    return CONFIG_DIR


def _run_build(pytestconfig: pytest.Config) -> tuple[str, str, int | None]:
    """Run build-collector.sh, showing its progress lines (stderr) on the terminal as they
    come, past pytest's output capture: the first build takes minutes, and a suite that
    prints nothing meanwhile looks hung. Returns (stdout, stderr, exit status or None on
    timeout)."""
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    terminal = pytestconfig.pluginmanager.getplugin("terminalreporter")
    started = time.monotonic()
    proc = subprocess.Popen(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL)
    out: list[str] = []
    err: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read() if proc.stdout else ""), daemon=True)
    reader.start()
    assert proc.stderr is not None
    for line in proc.stderr:  # ends when the script exits (or is killed below)
        err.append(line)
        if "cached:" in line or "built by another process" in line:
            continue  # nothing to wait for: stay quiet
        text = f"[{time.monotonic() - started:5.0f}s] {line.rstrip()}"
        if capture is not None and terminal is not None:
            with capture.global_and_fixture_disabled():
                terminal.write_line(text)
        if time.monotonic() - started > BUILD_TIMEOUT_S:
            proc.kill()
            break
    try:
        returncode: int | None = proc.wait(timeout=max(1.0, BUILD_TIMEOUT_S - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        returncode = None
    reader.join(10)
    return "".join(out), "".join(err), returncode


@pytest.fixture(scope="session")
def otelcol_binary(pytestconfig: pytest.Config) -> str:
    """Absolute path of the Collector built from collector-config/builder.yaml (cached);
    the build's progress is shown while it runs."""
    if shutil.which("go") is None:
        msg = (
            "Go is not installed, so the OpenTelemetry Collector cannot be built. "
            "Install Go >= 1.26 (https://go.dev/doc/install) and re-run; "
            "collector-config/build-collector.sh then builds it once into "
            "${OTEL_PROGRESS_CACHE:-~/.cache/otel-progress}."
        )
        if in_ci():
            pytest.fail("CI=true: " + msg, pytrace=False)
        pytest.skip(msg)
    stdout, stderr, returncode = _run_build(pytestconfig)
    if returncode is None:
        pytest.fail(f"build-collector.sh did not finish within {BUILD_TIMEOUT_S}s", pytrace=False)
    if returncode != 0:
        tail = "\n".join(stderr.splitlines()[-40:])
        pytest.fail(f"build-collector.sh failed (exit {returncode}):\n{tail}", pytrace=False)
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    assert lines, "build-collector.sh printed no binary path"
    binary = lines[-1].strip()
    assert os.path.isabs(binary), binary
    assert os.access(binary, os.X_OK), f"not executable: {binary}"
    return binary


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of promtool; apt-installs Debian's `prometheus` package when missing."""
    found = shutil.which("promtool")
    if found:
        return found
    how = "apt-get install -y prometheus  (Debian's package ships /usr/bin/promtool)"
    if not _is_root():
        if in_ci():
            pytest.fail(f"CI=true: promtool missing and not root, cannot run: {how}", pytrace=False)
        pytest.skip(f"promtool is not installed and this is not root; install it with: sudo {how}")
    if shutil.which("apt-get") is None:
        msg = f"promtool is not installed and apt-get is not available; install promtool ({how})"
        if in_ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "prometheus"]
    # Debian's postinst would start the prometheus daemon where services may
    # start; /usr/sbin/policy-rc.d (exit 101) in containers prevents that.
    proc = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=600, check=False)
        proc = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900, check=False)
    found = shutil.which("promtool")
    if not found:
        pytest.fail(
            f"`{' '.join(install)}` did not provide promtool (exit {proc.returncode}):\n{proc.stderr[-2000:]}",
            pytrace=False,
        )
    return found


@pytest.fixture(scope="session")
def otlp_deps() -> None:
    """grpcio + opentelemetry-proto importable (pip-installed here if missing)."""
    missing = []
    for mod, pkg in (("grpc", "grpcio"), ("opentelemetry.proto.collector.trace.v1", "opentelemetry-proto")):
        try:
            importlib.import_module(mod)
        except ImportError:
            missing.append(pkg)
    if not missing:
        return
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", *missing],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    importlib.invalidate_caches()
    try:
        importlib.import_module("grpc")
        importlib.import_module("opentelemetry.proto.collector.trace.v1")
    except ImportError:
        msg = f"could not pip install {missing} (exit {proc.returncode}): {proc.stderr[-1000:]}"
        if in_ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
