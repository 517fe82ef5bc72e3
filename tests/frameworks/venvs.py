"""One cached virtualenv per requirements file of the matrix: where it lives, how it is
built (and by whom, when several processes want it), and the directory that makes the
agents import this checkout's otel-progress."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from .rows import ROOT, discover

CACHE_DIR = Path(os.environ.get("OTEL_PROGRESS_MATRIX_CACHE", "~/.cache/otel-progress/frameworks")).expanduser()
BUILD_TIMEOUT_S = 20 * 60
#: pip output that means the package index could not be reached (not a bad pin).
_NETWORK_ERRORS = re.compile(r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|"
                             r"Network is unreachable|Connection refused|ConnectTimeout|ReadTimeout")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def _project_metadata() -> str:
    """What of the repo's ``pyproject.toml`` goes into a virtualenv: the ``[project]`` table
    (dependencies, entry points) without the optional extras, and the build system. A change
    there must rebuild the virtualenvs; one to the test extra must not."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        data = tomllib.load(f)
    project = {k: v for k, v in data.get("project", {}).items() if k != "optional-dependencies"}
    return json.dumps([project, data.get("build-system")], sort_keys=True)


def venv_path(requirements: Path) -> Path:
    """Where the virtualenv for one requirements file lives: named after the framework and
    the file, keyed by the file's text, the Python version and the repo's packaging
    metadata (:func:`_project_metadata`). Not by the checkout: the code that runs is the checkout's
    (:func:`source_path`), so a fresh clone elsewhere reuses the same virtualenvs."""
    key = hashlib.sha256()
    for part in (requirements.read_text(), sys.version, _project_metadata()):
        key.update(part.encode())
        key.update(b"\0")
    stem = requirements.stem.removeprefix("requirements").strip("-_") or "default"
    return CACHE_DIR / f"{requirements.parent.name}-{stem}-{key.hexdigest()[:12]}"


def source_path() -> Path:
    """A directory holding only a link to this checkout's ``otel_progress`` package, put
    first on the agents' ``PYTHONPATH``: the virtualenvs carry an installed copy of
    otel-progress (its dependencies and its ``opentelemetry_instrumentor`` entry point),
    and the checkout's code is what is imported."""
    digest = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    src = CACHE_DIR / "src" / digest
    link = src / "otel_progress"
    if not link.is_symlink() or link.resolve() != (ROOT / "otel_progress").resolve():
        src.mkdir(parents=True, exist_ok=True)
        tmp = src / f".otel_progress.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(ROOT / "otel_progress", target_is_directory=True)
        tmp.replace(link)
    return src


def _snapshot_project(into: Path) -> Path:
    """A copy of the project's packaging files and package, so pip builds it outside the
    shared working tree (no ``build/`` there, no two builds in one directory)."""
    dest = into / "otel-progress"
    shutil.copytree(ROOT / "otel_progress", dest / "otel_progress",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    return dest


class BuildError(RuntimeError):
    """pip could not build a virtualenv; ``network`` when the index was unreachable."""

    def __init__(self, message: str, network: bool) -> None:
        super().__init__(message)
        self.network = network


#: Progress lines of the builds; under pytest the fixture drains them to the terminal (a
#: background thread cannot write past pytest's capture), elsewhere they go to stderr.
PROGRESS: queue.SimpleQueue[str] | None = None


def _say(message: str) -> None:
    line = f"[frameworks] {message}"
    if PROGRESS is not None:
        PROGRESS.put(line)
    else:
        print(line, file=sys.stderr, flush=True)


def _run_build(venv: Path, requirements: Path, project: Path, log: Path, label: str, start: float) -> None:
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q",
         "-r", str(requirements), str(project)],
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH", "PIP_REQUIRE"))}
    with log.open("w") as out:
        for cmd in steps:
            out.write(f"$ {' '.join(cmd)}\n")
            out.flush()
            remaining = BUILD_TIMEOUT_S - (time.monotonic() - start)
            try:
                proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                      timeout=max(remaining, 1), check=False, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                shutil.rmtree(venv, ignore_errors=True)
                raise BuildError(f"building {venv.name} timed out after {BUILD_TIMEOUT_S} s; see {log}",
                                 network=False) from None
            if proc.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                text = log.read_text()
                raise BuildError(f"building {venv.name} for {label} failed:\n{text[-3000:]}",
                                 network=bool(_NETWORK_ERRORS.search(text)))


def build_venv(requirements: Path) -> Path:
    """The virtualenv for ``requirements``: reused when complete, else built (one builder at
    a time per venv, across processes). Raises :class:`BuildError`."""
    venv = venv_path(requirements)
    done = venv / ".complete"
    if done.exists():
        return venv
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    log = venv.with_suffix(".log")
    with open(venv.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        label = f"{requirements.parent.name}/{requirements.name}"
        _say(f"building {venv.name} for {label} (log: {log})")
        start = time.monotonic()
        workdir = Path(tempfile.mkdtemp(prefix="otel-progress-build-"))
        try:
            _run_build(venv, requirements, _snapshot_project(workdir), log, label, start)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        done.write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))
        _say(f"built {venv.name} in {time.monotonic() - start:.0f} s")
    return venv


class Builder:
    """Builds the virtualenvs of many set-ups in a few parallel processes, in the order
    they were asked for; :meth:`get` waits for one."""

    def __init__(self, jobs: int | None = None) -> None:
        jobs = jobs or int(os.environ.get("OTEL_PROGRESS_MATRIX_BUILD_JOBS", "2"))
        self._pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="venv-build")
        self._futures: dict[Path, Future[Path]] = {}

    def submit(self, requirements: Iterable[Path]) -> None:
        for req in requirements:
            if req not in self._futures:
                self._futures[req] = self._pool.submit(build_venv, req)

    def get(self, requirements: Path, waiting: Callable[[], None] | None = None) -> Path:
        """The virtualenv of ``requirements``; ``waiting`` is called every few seconds
        while its build goes on."""
        self.submit([requirements])
        future = self._futures[requirements]
        deadline = time.monotonic() + BUILD_TIMEOUT_S * 2
        while True:
            try:
                return future.result(timeout=5)
            except FutureTimeout:
                if time.monotonic() > deadline:
                    raise BuildError(f"no virtualenv for {requirements} after {BUILD_TIMEOUT_S * 2} s",
                                     network=False) from None
                if waiting is not None:
                    waiting()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def prebuild(jobs: int = 2) -> int:
    """Build every set-up's virtualenv, ``jobs`` at a time (CI starts this in the background
    before the tests, at low priority; the tests then find them built or wait on their lock).
    Returns 1 if any build failed (the tests that need it will fail and say why)."""
    requirements = list(dict.fromkeys(s.requirements_path for s in discover()))
    builder = Builder(jobs)
    builder.submit(requirements)
    start = time.monotonic()
    failed = 0
    for req in requirements:
        try:
            builder.get(req)
        except BuildError as exc:
            failed += 1
            _say(str(exc).splitlines()[0])
    builder.shutdown()
    _say(f"prebuild: {len(requirements)} virtualenvs, {failed} failed, {time.monotonic() - start:.0f} s")
    return 1 if failed else 0
