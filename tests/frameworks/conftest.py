"""Fixtures of the framework matrix: one virtualenv builder for the session, started with
every virtualenv the selected tests need (two builds at a time) as soon as the first matrix
test runs, so later set-ups are ready by the time their tests come."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._matrix.testing import built_or_fail

from .harness import Builder, Setup
from .venvs import CACHE_DIR, PROGRESS


def _needed(session: pytest.Session) -> list[Path]:
    out: list[Path] = []
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        setup = callspec.params.get("setup") if callspec is not None else None
        if isinstance(setup, Setup) and setup.requirements_path not in out:
            out.append(setup.requirements_path)
    return out


def _report_progress(config: pytest.Config) -> None:
    """Write the builds' progress lines to the terminal, past pytest's capture."""
    lines_queue = PROGRESS.queue
    if lines_queue is None or lines_queue.empty():
        return
    capman = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")
    lines = []
    while not lines_queue.empty():
        lines.append(lines_queue.get_nowait())
    if reporter is None or capman is None:
        return
    with capman.global_and_fixture_disabled():
        reporter.write("\n" + "\n".join(lines) + "\n")


@pytest.fixture(scope="session")
def venv_builder(request: pytest.FixtureRequest) -> Iterator[Builder]:
    PROGRESS.queue = queue.SimpleQueue()
    builder = Builder()
    needed = _needed(request.session)
    builder.submit(needed)
    PROGRESS.say(f"{len(needed)} virtualenvs for the selected set-ups, missing ones built in the background "
                 f"under {CACHE_DIR}")
    yield builder
    builder.shutdown()
    _report_progress(request.config)
    PROGRESS.queue = None


@pytest.fixture
def venv(venv_builder: Builder, setup: Setup, request: pytest.FixtureRequest) -> Iterator[Path]:
    """The set-up's virtualenv. A build that fails fails the test; locally, one that failed
    because the package index was unreachable skips it (never under CI=true)."""
    def report() -> None:
        _report_progress(request.config)

    try:
        path = built_or_fail(lambda: venv_builder.get(setup.requirements_path, report),
                             f"{setup.id}: package index unreachable, cannot build its virtualenv")
    finally:
        report()
    yield path
