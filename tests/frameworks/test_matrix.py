"""Issue 9's matrix: every set-up under ``setups/`` × the three scenarios, each a real
framework with a real instrumentation from PyPI on a scripted model, run zero-code under
``opentelemetry-instrument`` with otel-progress installed.

- ``loop``: the same tool call with the same result, again and again: caught, as a
  ``no_progress``/``livelock`` event on a tool span;
- ``empty_search``: a search rephrased every turn that keeps returning nothing: caught;
- ``healthy``: every call brings something new: no span is annotated.

Issue 29's model scenarios (``model_scenarios`` in a ``setups.toml``): each loop must bring a
detection with the reason of :data:`tests._matrix.rows.MODEL_EXPECTED` (strict xfails while
:data:`tests._matrix.rows.AWAITING_ISSUE_29` names them), each healthy twin no annotation,
and every run at least three model-call spans.

A set-up marked ``status = "cannot"`` (no tool spans, or no content at all) is only
asserted to run without a crash and without a false detection.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests._matrix.rows import MODEL_EXPECTED
from tests._matrix.testing import setup_params

from .harness import ROOT, Run, Setup, agent_env, discover, run_agent

SETUPS = discover()


def _explain(run: Run) -> str:
    return f"\n{run.summary()}\n--- stderr (tail) ---\n{run.stderr[-2500:]}"


@pytest.mark.timeout(3600)  # the first test may wait for its virtualenv to be built
@pytest.mark.parametrize(("setup", "scenario"), setup_params(SETUPS))
def test_setup(setup: Setup, scenario: str, venv: Path) -> None:
    run = run_agent(setup, scenario, venv)
    assert run.returncode == 0, f"agent.py exited {run.returncode}" + _explain(run)
    assert not run.crashes(), "otel-progress raised:\n" + "\n".join(run.crashes())
    flagged = run.flagged()
    if scenario in MODEL_EXPECTED:
        _judge_model_scenario(run, scenario)
        return
    if scenario == "healthy":
        assert not flagged, "the healthy run was annotated" + _explain(run)
    if setup.warning and scenario != "healthy":
        assert setup.warning in run.stderr, f"expected on stderr: {setup.warning!r}" + _explain(run)
    if not setup.works:
        return
    tools = run.tool_spans()
    assert len(tools) >= setup.min_tool_spans, (
        f"expected at least {setup.min_tool_spans} tool spans, got {len(tools)}" + _explain(run))
    if scenario != "healthy":
        caught = [s for s in tools if s in flagged]
        assert caught, f"the {scenario} run was not caught on a tool span" + _explain(run)


def _judge_model_scenario(run: Run, scenario: str) -> None:
    expected = MODEL_EXPECTED[scenario]
    if expected is None:
        assert not run.flagged(), f"the {scenario} run was annotated" + _explain(run)
    if not run.setup.works:
        return
    models = run.model_spans()
    assert len(models) >= 3, f"expected at least 3 model-call spans, got {len(models)}" + _explain(run)
    if expected is not None:
        assert expected in run.reasons(), (f"the {scenario} run was not caught as {expected} "
                                           f"(reasons: {sorted(run.reasons())})" + _explain(run))


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("setup", SETUPS[:1], ids=lambda s: s.id)
def test_agents_import_the_checkouts_code(setup: Setup, venv: Path) -> None:
    # the virtualenvs hold an installed copy of otel-progress (entry point, dependencies);
    # the agents must run this checkout's package, not that copy
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", "import otel_progress; print(otel_progress.__file__)"],
                          env=agent_env(setup), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert Path(proc.stdout.strip()).resolve() == (ROOT / "otel_progress" / "__init__.py").resolve()


def test_every_setup_directory_is_complete() -> None:
    # discover() already rejects malformed files; this keeps an empty matrix from passing
    assert SETUPS, "no set-ups found under tests/frameworks/setups"
    for setup in SETUPS:
        text = setup.requirements_path.read_text()
        pins = [line.split("#")[0].strip() for line in text.splitlines()]
        pins = [p for p in pins if p and not p.startswith("-")]
        loose = [p for p in pins if "==" not in p]
        assert not loose, f"{setup.requirements_path}: not pinned with ==: {loose}"
