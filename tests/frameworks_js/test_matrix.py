"""Issue 18's JavaScript matrix: every set-up under ``setups/`` x the three scenarios, each a
real framework with a real instrumentation from npm on a scripted model, exporting over
OTLP to the real Collector, which hands the spans to a real ``otel-progress serve``:

- ``loop`` and ``empty_search``: caught, as a ``no_progress``/``livelock`` event on a tool
  span of what serve forwarded;
- ``healthy``: no forwarded span is annotated;
- and ``otel-progress scan`` of what the agent sent (the Collector's file export) finds the
  same detections on the same tool spans;
- issue 29's model scenarios (``model_scenarios`` in a ``setups.toml``): a loop must bring a
  detection with the reason of :data:`tests._matrix.rows.MODEL_EXPECTED` on any forwarded
  span (strict xfails while :data:`tests._matrix.rows.AWAITING_ISSUE_29` names them), a healthy
  twin none, each run at least three model-call spans, scan the same as serve.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._matrix.rows import MODEL_EXPECTED
from tests._matrix.testing import setup_params

from .pipeline import Pipeline
from .rows import Setup, discover
from .runs import Run, run_agent, scan_detections

SETUPS = discover()


def _explain(run: Run, pipeline: Pipeline) -> str:
    return f"\n{run.summary()}\n--- stderr (tail) ---\n{run.stderr[-2500:]}\n{pipeline.logs(15)}"


@pytest.mark.timeout(1800)  # the first test may wait for the Collector build and an npm install
@pytest.mark.parametrize(("setup", "scenario"), setup_params(SETUPS))
def test_setup(setup: Setup, scenario: str, env: Path, pipeline: Pipeline, tmp_path: Path) -> None:
    run = run_agent(setup, scenario, env, pipeline)
    assert run.returncode == 0, f"agent.mjs exited {run.returncode}" + _explain(run, pipeline)
    assert run.exported.raw, "the agent exported no span" + _explain(run, pipeline)
    sent, forwarded = {s.span_id for s in run.exported.raw}, {s.span_id for s in run.annotated}
    assert sent <= forwarded, f"serve did not forward {len(sent - forwarded)} spans" + _explain(run, pipeline)
    flagged = run.flagged()
    if scenario in MODEL_EXPECTED:
        _judge_model_scenario(run, scenario, pipeline, tmp_path)
        return
    if scenario == "healthy":
        assert not flagged, "the healthy run was annotated" + _explain(run, pipeline)
    if not setup.works:
        return
    tools = run.tool_spans()
    assert len(tools) >= setup.min_tool_spans, (
        f"expected at least {setup.min_tool_spans} tool spans, got {len(tools)}" + _explain(run, pipeline))
    served = run.served_detections()
    if scenario != "healthy":
        assert served, f"the {scenario} run was not caught on a tool span" + _explain(run, pipeline)
    scanned, stderr = scan_detections(run, tmp_path)
    if scenario == "healthy":
        assert not scanned, f"scan flagged the healthy run: {sorted(scanned)}\n{stderr[-1500:]}"
    else:
        assert scanned, f"scan did not catch the {scenario} run\n{stderr[-1500:]}" + _explain(run, pipeline)
    assert scanned == served, f"scan found {sorted(scanned)}, serve {sorted(served)}" + _explain(run, pipeline)


def _judge_model_scenario(run: Run, scenario: str, pipeline: Pipeline, tmp_path: Path) -> None:
    expected = MODEL_EXPECTED[scenario]
    if expected is None:
        assert not run.flagged(), f"the {scenario} run was annotated" + _explain(run, pipeline)
    if not run.setup.works:
        return
    models = run.model_spans()
    assert len(models) >= 3, f"expected at least 3 model-call spans, got {len(models)}" + _explain(run, pipeline)
    served = run.served_detections(anywhere=True)
    scanned, stderr = scan_detections(run, tmp_path, anywhere=True)
    if expected is None:
        assert not scanned, f"scan flagged the {scenario} run: {sorted(scanned)}\n{stderr[-1500:]}"
    else:
        reasons = {reason for _, reason in served}
        assert expected in reasons, (f"the {scenario} run was not caught as {expected} (reasons: {sorted(reasons)})"
                                     + _explain(run, pipeline))
    assert scanned == served, f"scan found {sorted(scanned)}, serve {sorted(served)}" + _explain(run, pipeline)


def test_every_setup_directory_is_complete() -> None:
    # discover() already rejects malformed files and loose pins; this keeps an empty matrix from passing
    assert len({s.framework for s in SETUPS}) >= 5, [s.id for s in SETUPS]
