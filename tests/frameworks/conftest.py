"""Fixtures of the framework matrix: one virtualenv builder for the session, started with
every virtualenv the selected tests need (two builds at a time) as soon as the first matrix
test runs, so later set-ups are ready by the time their tests come."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import venvs
from .harness import Builder, BuildError, Setup, in_ci


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
    if venvs.PROGRESS is None or venvs.PROGRESS.empty():
        return
    capman = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")
    lines = []
    while not venvs.PROGRESS.empty():
        lines.append(venvs.PROGRESS.get_nowait())
    if reporter is None or capman is None:
        return
    with capman.global_and_fixture_disabled():
        reporter.write("\n" + "\n".join(lines) + "\n")


@pytest.fixture(scope="session")
def venv_builder(request: pytest.FixtureRequest) -> Iterator[Builder]:
    venvs.PROGRESS = queue.SimpleQueue()
    builder = Builder()
    needed = _needed(request.session)
    builder.submit(needed)
    venvs.PROGRESS.put(f"[frameworks] {len(needed)} virtualenvs for the selected set-ups, "
                         f"missing ones built in the background under {venvs.CACHE_DIR}")
    yield builder
    builder.shutdown()
    _report_progress(request.config)
    venvs.PROGRESS = None


@pytest.fixture
def venv(venv_builder: Builder, setup: Setup, request: pytest.FixtureRequest) -> Iterator[Path]:
    """The set-up's virtualenv. A build that fails fails the test; locally, one that failed
    because the package index was unreachable skips it (never under CI=true)."""
    try:
        path = venv_builder.get(setup.requirements_path, lambda: _report_progress(request.config))
    except BuildError as exc:
        if exc.network and not in_ci():
            pytest.skip(f"{setup.id}: package index unreachable, cannot build its virtualenv: {exc}")
        pytest.fail(str(exc), pytrace=False)
    finally:
        _report_progress(request.config)
    yield path
