"""Fixtures of the JavaScript matrix: the pipeline (the real Collector, built once and
cached by collector-config/build-collector.sh, and a real ``otel-progress serve``),
started once for the session, and each framework's installed packages."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._matrix.testing import built_or_fail
from tests.collector.conftest import in_ci, otelcol_binary  # noqa: F401 - fixture re-exported

from .envs import install
from .pipeline import Pipeline, PipelineError
from .rows import Setup


def _unavailable(reason: str) -> None:
    if in_ci():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pipeline(otelcol_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:  # noqa: F811
    p = Pipeline(otelcol_binary, tmp_path_factory.mktemp("js-matrix"))
    try:
        p.start()
    except PipelineError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield p
    p.stop()


@pytest.fixture
def env(setup: Setup) -> Path:
    """The framework's installed packages (``npm ci`` once, cached). An install that fails
    fails the test; locally, one that failed because the registry was unreachable, or a
    machine without Node.js, skips it (never under CI=true)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        _unavailable("the JavaScript matrix needs Node.js and npm on PATH")
    return built_or_fail(lambda: install(setup.directory), f"{setup.id}: npm registry unreachable")
