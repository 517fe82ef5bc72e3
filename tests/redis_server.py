"""A real Redis (or Valkey) server for the tests, from Debian's packages.

:func:`redis_server` finds ``redis-server`` (or ``valkey-server``), installs Debian's
``redis-server`` package with apt-get when it is missing and the tests run as root, and
starts it on a free loopback port without persistence. Where it cannot be had, the test
is skipped with the reason, except under ``CI=true``, where that is a failure (CI must
run these tests: ``.ci/run`` installs the package). The Python client is redis-py, the
``store`` extra (also in ``test``)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager

import pytest

__all__ = ["redis_server"]

_HOW = "apt-get install -y redis-server  (Debian's package), and pip install -e '.[store]'"


def _unavailable(why: str) -> None:
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"CI=true: {why}: {_HOW}", pytrace=False)
    pytest.skip(f"{why}: {_HOW}")


def _binary() -> str | None:
    found = shutil.which("redis-server") or shutil.which("valkey-server")
    if found or os.geteuid() != 0 or not shutil.which("apt-get"):
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "redis-server"]
    if subprocess.run(install, capture_output=True, env=env, check=False, timeout=600).returncode != 0:
        subprocess.run(["apt-get", "update"], capture_output=True, env=env, check=False, timeout=600)
        subprocess.run(install, capture_output=True, env=env, check=False, timeout=600)
    return shutil.which("redis-server") or shutil.which("valkey-server")


def _free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_server() -> Iterator[str]:
    """A running server for the ``with`` block; yields its URL (``redis://127.0.0.1:PORT/0``)."""
    try:
        import redis
    except ImportError:
        _unavailable("the Redis client (redis-py) is not installed")
    binary = _binary()
    if binary is None:
        _unavailable("no redis-server or valkey-server, and it cannot be installed here (not root)")
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix="otel-progress-redis-")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", workdir, "--daemonize", "no"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except redis.RedisError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                    pytest.fail(f"{binary} did not start: {out[-2000:]}", pytrace=False)
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)
