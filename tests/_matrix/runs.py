"""An agent run of either matrix as a process: its environment (none of the test process's
telemetry or credentials, no way off the machine), the command with a timeout and its
output kept, and the output written where ``--dump`` asks."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from .rows import MatrixSetup

#: The span events by which otel-progress reports a detection.
DETECTION_EVENTS = ("no_progress", "livelock")

#: Part of every agent run's environment: the proxy variables point every HTTP client that
#: honours them at a closed local port, so a model call that escaped the script fails at
#: once instead of leaving the machine; and no library's own usage telemetry.
OFFLINE_ENV = {
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
    "DO_NOT_TRACK": "1",
}


def environ_without(prefixes: tuple[str, ...], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) without the variables named with ``prefixes``."""
    return {k: v for k, v in (os.environ if environ is None else environ).items() if not k.startswith(prefixes)}


def run_captured(cmd: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float) -> tuple[int, str, str]:
    """Run ``cmd`` with no stdin; ``(exit status, stdout, stderr)``, status -1 and what it
    printed so far when it ran past ``timeout`` seconds."""
    try:
        proc = subprocess.run(list(cmd), cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout,
                              check=False, stdin=subprocess.DEVNULL)
        return proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return -1, out, err + f"\n[harness] timed out after {timeout} s"


def dump_output(dump: Path | None, setup: MatrixSetup, scenario: str, out: str, err: str) -> Path | None:
    """Write a run's stdout and stderr into ``dump`` (if given) as ``<framework>-<setup>-<scenario>``
    ``.out`` and ``.err``; returns that path without a suffix, for more files of the run."""
    if dump is None:
        return None
    dump.mkdir(parents=True, exist_ok=True)
    base = dump / f"{setup.framework}-{setup.name}-{scenario}"
    base.with_suffix(".out").write_text(out)
    base.with_suffix(".err").write_text(err)
    return base
