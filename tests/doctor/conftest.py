"""Fixtures of the doctor tests: the environment of a run, and test instrumentor
distributions (real entry points on ``PYTHONPATH``, as pip would install them)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
DOCTOR = [str(BIN / "otel-progress"), "doctor"]


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's environment without OTEL_*/OPENINFERENCE_*/TRACELOOP_* settings,
    console export, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "OPENINFERENCE_", "TRACELOOP_", "ADK_", "PYTEST_", "PYTHONPATH"))}
    env.update(OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none",
               OTEL_BSP_SCHEDULE_DELAY="100")
    env.update(extra)
    return env


def doctor(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DOCTOR, *args], env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


def _write_dist(root: Path, name: str, module: str, body: str, requires: tuple[str, ...] = (),
                depends: tuple[str, ...] = ()) -> None:
    (root / f"{module}.py").write_text(textwrap.dedent(body))
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    meta = ["Metadata-Version: 2.1", f"Name: {name}", "Version: 1.0"]
    meta += [f"Requires-Dist: {d}" for d in depends]
    if requires:
        meta.append("Provides-Extra: instruments")
        meta += [f'Requires-Dist: {r} ; extra == "instruments"' for r in requires]
    (info / "METADATA").write_text("\n".join(meta) + "\n")
    (info / "entry_points.txt").write_text(f"[opentelemetry_instrumentor]\n{module} = {module}:Instrumentor\n")
    (info / "RECORD").write_text("")


_INSTRUMENTOR = '''
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

class Instrumentor(BaseInstrumentor):
    def instrumentation_dependencies(self):
        return {deps!r}

    def _instrument(self, **kwargs):
        {body}

    def _uninstrument(self, **kwargs):
        pass
'''


@pytest.fixture
def test_dists(tmp_path: Path) -> Callable[..., Path]:
    """Make a directory of test instrumentor distributions: ``kind`` ``raises`` (raises
    at ``instrument()``, as OpenLLMetry's MCP instrumentor does on mcp 2.x), ``needs_lib``
    (its ``instruments`` requirement names a library that is not installed) or
    ``genai_user`` (it requires ``opentelemetry-util-genai``, as the contrib GenAI
    instrumentations do)."""

    def make(*kinds: str) -> Path:
        root = tmp_path / "dists"
        root.mkdir(exist_ok=True)
        for kind in kinds:
            if kind == "raises":
                _write_dist(root, "doctor-test-raises", "doctor_test_raises",
                            _INSTRUMENTOR.format(deps=(), body="raise AttributeError('module mcp has no attribute X')"))
            elif kind == "needs_lib":
                _write_dist(root, "doctor-test-needs-lib", "doctor_test_needs_lib",
                            _INSTRUMENTOR.format(deps=("doctor-absent-lib >= 1",), body="pass"),
                            requires=("doctor-absent-lib>=1",))
            elif kind == "genai_user":  # an instrumentation built on opentelemetry-util-genai
                _write_dist(root, "doctor-test-genai-user", "doctor_test_genai_user",
                            _INSTRUMENTOR.format(deps=(), body="pass"), depends=("opentelemetry-util-genai>=1.3b0",))
            else:
                raise ValueError(kind)
        return root

    return make
