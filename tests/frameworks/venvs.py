"""One cached virtualenv per requirements file of the matrix: where it lives, how it is
built (and by whom, when several processes want it: :mod:`tests._matrix.builds`), and the
directory that makes the agents import this checkout's otel-progress."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from tests._matrix import builds
from tests._matrix.runs import environ_without

from .rows import ROOT, discover

__all__ = ["BUILD_TIMEOUT_S", "CACHE_DIR", "PROGRESS", "BuildError", "Builder", "build_venv", "prebuild",
           "source_path", "venv_path"]

CACHE_DIR = builds.cache_root("OTEL_PROGRESS_MATRIX_CACHE", "~/.cache/otel-progress/frameworks")
BUILD_TIMEOUT_S = 20 * 60
#: pip output that means the package index could not be reached (not a bad pin).
_NETWORK_ERRORS = re.compile(r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|"
                             r"Network is unreachable|Connection refused|ConnectTimeout|ReadTimeout")
#: Progress lines of the builds (``PROGRESS.queue``: see :class:`tests._matrix.builds.Progress`).
PROGRESS = builds.Progress("frameworks")


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
    key = builds.cache_key((requirements.read_text(), sys.version, _project_metadata()))
    stem = requirements.stem.removeprefix("requirements").strip("-_") or "default"
    return CACHE_DIR / f"{requirements.parent.name}-{stem}-{key}"


def source_path() -> Path:
    """A directory holding only a link to this checkout's ``otel_progress`` package, put
    first on the agents' ``PYTHONPATH``: the virtualenvs carry an installed copy of
    otel-progress (its dependencies and its ``opentelemetry_instrumentor`` entry point),
    and the checkout's code is what is imported."""
    src = CACHE_DIR / "src" / builds.checkout_digest(ROOT)
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


class BuildError(builds.BuildFailed):
    """pip could not build a virtualenv; ``network`` when the index was unreachable."""


def build_venv(requirements: Path) -> Path:
    """The virtualenv for ``requirements``: reused when complete, else built (one builder at
    a time per venv, across processes). Raises :class:`BuildError`."""
    venv = venv_path(requirements)
    label = f"{requirements.parent.name}/{requirements.name}"

    def build(log: Path) -> None:
        workdir = Path(tempfile.mkdtemp(prefix="otel-progress-build-"))
        try:
            project = _snapshot_project(workdir)
            steps = [[sys.executable, "-m", "venv", str(venv)],
                     [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q",
                      "-r", str(requirements), str(project)]]
            builds.run_steps(steps, log, what=f"building {venv.name} for {label}", timeout=BUILD_TIMEOUT_S,
                             network=_NETWORK_ERRORS, error=BuildError,
                             env=environ_without(("VIRTUAL_ENV", "PYTHONPATH", "PIP_REQUIRE")))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    return builds.build_once(venv, label, build, PROGRESS)


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


def prebuild(jobs: int = 2, requirements: Iterable[Path] | None = None) -> int:
    """Build the virtualenv of every set-up (or of ``requirements``), ``jobs`` at a time (a
    test session starts this in the background, at low priority: :mod:`tests._background`;
    the tests then find them built or wait on their lock). Returns 1 if any build failed
    (the tests that need it will fail and say why)."""
    requirements = list(dict.fromkeys(requirements or (s.requirements_path for s in discover())))
    builder = Builder(jobs)
    builder.submit(requirements)
    try:
        return builds.prebuild_all(requirements, builder.get, PROGRESS, "virtualenvs")
    finally:
        builder.shutdown()
