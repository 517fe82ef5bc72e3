"""A native profile of ``otel-progress serve`` under the bench's load: where its CPU goes
by library (the interpreter, protobuf's upb, grpcio's core and its zlib, BLAKE3, the C
library, the kernel) and the hottest symbols, sampled with Linux ``perf`` while the
measured requests are handled. Used by ``bench_service.py --perf``.

Python 3.11 has no perf map of Python functions, so the interpreter's share is one line
(Python-level work: decoding into records, run tracking, the engine); the stage profile
splits it. Nothing is recorded when ``perf`` is missing or not permitted.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["PerfRecording", "perf_available", "report_lines"]

#: Libraries grouped as the report names them (by a substring of the DSO's file name).
_GROUPS = (
    ("libpython", "the interpreter (Python code: decode, runs, engine)"),
    ("python3", "the interpreter (Python code: decode, runs, engine)"),
    ("_message", "protobuf upb (parsing, serializing)"),
    ("cygrpc", "grpcio core (HTTP/2, gzip: its zlib is linked in)"),
    ("blake3", "BLAKE3 (digests)"),
    ("orjson", "orjson (JSON)"),
    ("libz", "system zlib"),
    ("libc", "the C library (memory, copies)"),
    ("kernel", "the kernel (network, scheduling)"),
)


def perf_available() -> bool:
    """Whether ``perf record`` can sample a process here."""
    if shutil.which("perf") is None:
        return False
    probe = subprocess.run(["perf", "record", "-q", "-o", "/dev/null", "--", "true"], capture_output=True,
                           check=False)
    return probe.returncode == 0


class PerfRecording:
    """``perf record`` of one process, from :meth:`start` to :meth:`stop`."""

    def __init__(self, pid: int, out: Path, frequency: int = 499) -> None:
        self.out = out
        self._args = ["perf", "record", "-q", "-F", str(frequency), "-p", str(pid), "-o", str(out)]
        self._proc: subprocess.Popen[Any] | None = None

    def start(self) -> None:
        self._proc = subprocess.Popen(self._args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()


def _report(path: Path, sort: str) -> list[tuple[float, str]]:
    proc = subprocess.run(["perf", "report", "-i", str(path), "--stdio", "--sort", sort, "--percent-limit", "0.5"],
                          capture_output=True, text=True, check=False)
    rows = []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if not parts or line.startswith("#") or not parts[0].endswith("%"):
            continue
        try:
            rows.append((float(parts[0].rstrip("%")), " ".join(parts[1:])))
        except ValueError:
            continue
    return rows


def report_lines(path: Path, per_span_us: float, top: int = 12) -> list[str]:
    """The recording's shares by library group, in % and in µs of ``per_span_us``, then the
    ``top`` symbols."""
    groups: dict[str, float] = {}
    for share, dso in _report(path, "dso"):
        name = next((label for key, label in _GROUPS if key in dso or (key == "kernel" and dso.startswith("[k"))),
                    f"other ({dso})")
        groups[name] = groups.get(name, 0.0) + share
    lines = [f"  {share:5.1f}%  {share * per_span_us / 100:6.1f} us/span  {name}"
             for name, share in sorted(groups.items(), key=lambda kv: -kv[1])]
    lines.append("  hottest symbols:")
    symbol: Callable[[tuple[float, str]], str] = lambda row: f"  {row[0]:5.1f}%  {row[1][:100]}"  # noqa: E731
    lines.extend(symbol(row) for row in _report(path, "dso,sym")[:top])
    return lines
