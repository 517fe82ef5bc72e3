"""The slow set-up, started in the background by the test session itself.

``python -m pytest`` needs, for some groups, things that take minutes to build the first
time: the Collector (``collector-config/build-collector.sh``, for ``tests/collector``,
``tests/e2e``, the JavaScript matrix and a coding-agent test), the framework matrix's
virtualenvs (``tests/frameworks``) and the JavaScript matrix's npm trees
(``tests/frameworks_js``). Those groups run last (``tests/conftest.py``); once the tests
are collected, :func:`start_needed` starts, for the selected tests only, each build whose
cache is missing, as a detached process at low priority, so that it overlaps every test
that runs before them. The fixtures of those groups wait for a build in progress (each
build takes a lock) instead of starting a second one.

Each job runs at most once at a time across sessions (and pytest-xdist workers): its
process holds ``<cache>/background/<job>.lock``; a session that finds it held says so and
starts nothing. Its output goes to ``<cache>/background/<job>.log`` (``<cache>``:
``${OTEL_PROGRESS_CACHE:-~/.cache/otel-progress}``); the session prints that path. It goes
on after the session ends (a cache it completes serves the next one).

``OTEL_PROGRESS_TEST_BACKGROUND=0`` starts nothing (the fixtures then build in the
foreground). ``OTEL_PROGRESS_TEST_BACKGROUND_WRAPPER``, a command (split as a shell would),
runs each job as ``WRAPPER COMMAND...`` instead of ``COMMAND...`` (``tests/test_background.py``
uses it to see what would be started without building anything).

``python -m tests._background frameworks REQUIREMENTS...`` and ``... frameworks_js
DIRECTORY...`` are the matrices' jobs: they build those caches only.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
MANIFEST = ROOT / "collector-config" / "builder.yaml"

__all__ = ["Job", "cache_dir", "collector_binary", "group_of", "main", "needed_jobs", "start", "start_needed"]


def cache_dir() -> Path:
    """``${OTEL_PROGRESS_CACHE:-~/.cache/otel-progress}``, as build-collector.sh has it."""
    return Path(os.environ.get("OTEL_PROGRESS_CACHE") or "~/.cache/otel-progress").expanduser()


def collector_binary() -> Path:
    """Where build-collector.sh puts the Collector: ``otelcol-<sha256(builder.yaml)[:12]>/<dist.name>``."""
    text = MANIFEST.read_bytes()
    name = re.search(rb"^\s*name:\s*([A-Za-z0-9._-]+)", text, re.MULTILINE)
    binary = name.group(1).decode() if name else "otelcol-progress"
    return cache_dir() / f"otelcol-{hashlib.sha256(text).hexdigest()[:12]}" / binary


@dataclass(frozen=True)
class Job:
    """A background build: its name, what it says it does, its command and niceness."""

    name: str
    what: str
    command: tuple[str, ...]
    nice: int = 10


def group_of(item: pytest.Item) -> str:
    """The directory under tests/ an item is in ("" for tests/ itself or elsewhere)."""
    try:
        parts = Path(str(item.path)).resolve().relative_to(TESTS).parts
    except ValueError:
        return ""
    return parts[0] if len(parts) > 1 else ""


def _setups(items: Sequence[pytest.Item], group: str) -> list[object]:
    """The matrix set-ups (``setup`` parameters) of the selected items of ``group``."""
    out: list[object] = []
    for item in items:
        if group_of(item) != group:
            continue
        callspec = getattr(item, "callspec", None)
        setup = callspec.params.get("setup") if callspec is not None else None
        if setup is not None and setup not in out:
            out.append(setup)
    return out


def _collector_job(items: Sequence[pytest.Item]) -> Job | None:
    if not any("otelcol_binary" in getattr(item, "fixturenames", ()) for item in items):
        return None
    if shutil.which("go") is None or os.access(collector_binary(), os.X_OK):
        return None  # (without Go its fixture says what to install)
    return Job("collector", "the Collector build", ("bash", str(ROOT / "collector-config" / "build-collector.sh")),
               nice=5)


def _frameworks_job(items: Sequence[pytest.Item]) -> Job | None:
    setups = _setups(items, "frameworks")
    if not setups:
        return None
    from tests.frameworks.venvs import venv_path

    requirements = list(dict.fromkeys(s.requirements_path for s in setups))  # type: ignore[attr-defined]
    missing = [str(r) for r in requirements if not (venv_path(r) / ".complete").exists()]
    if not missing:
        return None
    return Job("frameworks", f"{len(missing)} framework virtualenvs",
               (sys.executable, "-m", "tests._background", "frameworks", *missing))


def _frameworks_js_job(items: Sequence[pytest.Item]) -> Job | None:
    setups = _setups(items, "frameworks_js")
    if not setups or shutil.which("npm") is None:
        return None
    from tests._matrix.builds import BuildFailed
    from tests.frameworks_js.envs import env_path

    directories = list(dict.fromkeys(s.directory for s in setups))  # type: ignore[attr-defined]
    try:
        missing = [str(d) for d in directories if not (env_path(d) / ".complete").exists()]
    except BuildFailed:  # no node: the fixture says so
        return None
    if not missing:
        return None
    return Job("frameworks_js", f"{len(missing)} JavaScript framework installs (npm ci)",
               (sys.executable, "-m", "tests._background", "frameworks_js", *missing))


#: What can be started, in the order it is started.
JOBS: tuple[Callable[[Sequence[pytest.Item]], Job | None], ...] = (
    _collector_job, _frameworks_job, _frameworks_js_job)


def needed_jobs(items: Sequence[pytest.Item]) -> list[Job]:
    """The jobs the selected ``items`` need whose caches are missing."""
    return [job for make in JOBS if (job := make(items)) is not None]


def start(job: Job) -> tuple[bool, Path]:
    """Start ``job`` detached (a session of its own), its output into its log, unless it
    is running already (its lock is held). Returns (started, log)."""
    where = cache_dir() / "background"
    where.mkdir(parents=True, exist_ok=True)
    log = where / f"{job.name}.log"
    lock = os.open(where / f"{job.name}.lock", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False, log
        command = [*shlex.split(os.environ.get("OTEL_PROGRESS_TEST_BACKGROUND_WRAPPER", "")), *job.command]
        if shutil.which("nice"):
            command = ["nice", "-n", str(job.nice), *command]
        with log.open("w") as out:
            out.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {job.what}: {shlex.join(command)}\n")
            out.flush()
            # Detached: a shell of a new session starts the job in the background and exits
            # (nothing for this session to reap). The job inherits the locked descriptor: the
            # lock is held until it (and what it starts) ends, whatever becomes of this session.
            subprocess.run(["sh", "-c", 'exec "$@" &', "sh", *command], cwd=ROOT, stdin=subprocess.DEVNULL,
                           stdout=out, stderr=subprocess.STDOUT, start_new_session=True, pass_fds=(lock,),
                           check=True, timeout=30)
        return True, log
    finally:
        os.close(lock)


def start_needed(session: pytest.Session) -> None:
    """Start what the selected tests need in the background; say so, with the logs."""
    config = session.config
    if config.option.collectonly or os.environ.get("OTEL_PROGRESS_TEST_BACKGROUND", "1").strip() == "0":
        return
    reporter = config.pluginmanager.getplugin("terminalreporter")
    for job in needed_jobs(session.items):
        try:
            started, log = start(job)
        except (OSError, subprocess.SubprocessError) as exc:  # the fixture builds in the foreground instead
            line = f"otel-progress tests: could not start {job.what} in the background: {exc}"
        else:
            line = (f"otel-progress tests: {job.what} started in the background (log: {log})" if started
                    else f"otel-progress tests: {job.what} already under way in the background (log: {log})")
        if reporter is not None:
            reporter.write_line(line)


def main(argv: Sequence[str] | None = None) -> int:
    """``frameworks REQUIREMENTS...`` or ``frameworks_js DIRECTORY...``: build those caches."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] not in ("frameworks", "frameworks_js"):
        print("usage: python -m tests._background frameworks REQUIREMENTS... | frameworks_js DIRECTORY...",
              file=sys.stderr)
        return 2
    paths = [Path(a) for a in args[1:]]
    if args[0] == "frameworks":
        from tests.frameworks.venvs import prebuild

        return prebuild(int(os.environ.get("OTEL_PROGRESS_MATRIX_BUILD_JOBS", "2")), paths)
    from tests.frameworks_js.envs import prebuild as install_all

    return install_all(paths)


if __name__ == "__main__":
    raise SystemExit(main())
