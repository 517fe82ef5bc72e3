"""Fixtures of the framework matrix: one virtualenv builder for the session, started with
every virtualenv the selected tests need (two builds at a time) as soon as the first matrix
test runs, so later set-ups are ready by the time their tests come."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import Builder, BuildError, Setup, in_ci


def _needed(session: pytest.Session) -> list[Path]:
    out: list[Path] = []
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        setup = callspec.params.get("setup") if callspec is not None else None
        if isinstance(setup, Setup) and setup.requirements_path not in out:
            out.append(setup.requirements_path)
    return out


@pytest.fixture(scope="session")
def venv_builder(request: pytest.FixtureRequest) -> Iterator[Builder]:
    builder = Builder()
    builder.submit(_needed(request.session))
    yield builder
    builder.shutdown()


@pytest.fixture
def venv(venv_builder: Builder, setup: Setup) -> Path:
    """The set-up's virtualenv. A build that fails fails the test; locally, one that failed
    because the package index was unreachable skips it (never under CI=true)."""
    try:
        return venv_builder.get(setup.requirements_path)
    except BuildError as exc:
        if exc.network and not in_ci():
            pytest.skip(f"{setup.id}: package index unreachable, cannot build its virtualenv: {exc}")
        pytest.fail(str(exc), pytrace=False)
