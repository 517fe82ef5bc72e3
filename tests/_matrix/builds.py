"""The matrices' caches: one directory per key under a cache root (``~/.cache/otel-progress/
frameworks`` for the virtualenvs, ``.../frameworks-js`` for the npm trees), built once by
whichever process takes its lock first, reused by every checkout once it is marked complete;
and ``prebuild``, which builds them all up front (the test session starts the selected tests' builds
in the background: :mod:`tests._background`)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import queue
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

#: The file that marks a cache directory as complete (it holds the time it was built).
COMPLETE = ".complete"

T = TypeVar("T")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def cache_root(variable: str, default: str) -> Path:
    """The cache root: the environment variable ``variable`` if set, else ``default``."""
    return Path(os.environ.get(variable, default)).expanduser()


def cache_key(parts: Iterable[str]) -> str:
    """What names a cache directory after its inputs: the first 12 hex digits of the SHA-256
    of ``parts``, each followed by a NUL byte."""
    key = hashlib.sha256()
    for part in parts:
        key.update(part.encode())
        key.update(b"\0")
    return key.hexdigest()[:12]


def checkout_digest(root: Path) -> str:
    """What tells one checkout's files apart in a cache shared by all: the first 12 hex
    digits of the SHA-256 of its path."""
    return hashlib.sha256(str(root).encode()).hexdigest()[:12]


class BuildFailed(RuntimeError):
    """A cache directory could not be built; ``network`` when the package index or registry
    was unreachable (not a bad pin)."""

    def __init__(self, message: str, network: bool) -> None:
        super().__init__(message)
        self.network = network


class Progress:
    """A matrix's progress lines, ``[<tag>] ...``: to stderr, or into :attr:`queue` while one
    is set (under pytest a fixture drains it to the terminal: a build thread cannot write
    past pytest's capture)."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.queue: queue.SimpleQueue[str] | None = None

    def say(self, message: str) -> None:
        line = f"[{self.tag}] {message}"
        if self.queue is not None:
            self.queue.put(line)
        else:
            print(line, file=sys.stderr, flush=True)


def build_once(target: Path, label: str, build: Callable[[Path], None], progress: Progress,
               verbs: tuple[str, str] = ("building", "built")) -> Path:
    """``target`` (a cache directory): returned at once when complete, else built by
    ``build(log)`` under an exclusive lock ``<target>.lock`` (one builder per directory
    across processes; a second one waits, then finds it complete). ``build`` starts from no
    ``target``; one that raises leaves none. Its log is ``<target>.log``."""
    done = target / COMPLETE
    if done.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    log = target.with_suffix(".log")
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return target
        shutil.rmtree(target, ignore_errors=True)
        progress.say(f"{verbs[0]} {target.name} for {label} (log: {log})")
        start = time.monotonic()
        try:
            build(log)
        except Exception:
            shutil.rmtree(target, ignore_errors=True)
            raise
        done.write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))
        progress.say(f"{verbs[1]} {target.name} in {time.monotonic() - start:.0f} s")
    return target


def run_steps(steps: Sequence[Sequence[str]], log: Path, *, what: str, timeout: float, network: re.Pattern[str],
              error: type[BuildFailed], env: Mapping[str, str], cwd: Path | None = None) -> None:
    """Run the commands of a build one after the other, their output into ``log``, within
    ``timeout`` seconds in all. Raises ``error`` (``network`` when the log matches
    ``network``) saying ``what`` timed out or failed."""
    start = time.monotonic()
    with log.open("w") as out:
        for cmd in steps:
            out.write(f"$ {' '.join(cmd)}" + (f"  (in {cwd})" if cwd is not None else "") + "\n")
            out.flush()
            try:
                proc = subprocess.run(list(cmd), cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=dict(env),
                                      timeout=max(timeout - (time.monotonic() - start), 1), check=False,
                                      stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                raise error(f"{what} timed out after {timeout} s; see {log}", network=False) from None
            if proc.returncode != 0:
                out.flush()
                text = log.read_text()
                raise error(f"{what} failed:\n{text[-3000:]}", network=bool(network.search(text)))


def prebuild_all(items: Sequence[T], get: Callable[[T], object], progress: Progress, what: str) -> int:
    """``get`` each item's cache directory (the builds may run in parallel behind ``get``);
    a line per failure and a summary. Returns 1 if any failed (the tests that need it fail
    and say why), else 0."""
    start = time.monotonic()
    failed = 0
    for item in items:
        try:
            get(item)
        except BuildFailed as exc:
            failed += 1
            progress.say(str(exc).splitlines()[0])
    progress.say(f"prebuild: {len(items)} {what}, {failed} failed, {time.monotonic() - start:.0f} s")
    return 1 if failed else 0
