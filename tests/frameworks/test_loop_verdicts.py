"""Another loop check beside ours, in a real framework: Pydantic AI (the matrix's
``setups/pydantic_ai`` virtualenv) with a capability that writes its verdict as Pydantic AI
Harness's ``LoopDetection`` does (``verdicts/pydantic_ai_loop_check.py``: the same span
event from the same hooks; the harness's own capability is in no PyPI release up to 0.62.0).
Checks on which spans the real framework puts the event (the current span of
``after_tool_execute`` is the tool's, of ``after_model_request`` the model request's: both
are read at their place in the run) and that a user who runs both gets one report per loop:
our detections made after a verdict carry it, none is written for the verdict."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests._matrix.testing import built_or_fail

from .runs import source_path
from .venvs import build_venv

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "setups" / "pydantic_ai" / "requirements.txt"
SCRIPT = HERE / "verdicts" / "pydantic_ai_loop_check.py"
HARNESS = "pydantic_ai_harness.loop_detection"


def test_a_harness_style_verdict_in_real_pydantic_ai_is_one_report_with_ours() -> None:
    venv = built_or_fail(lambda: build_venv(REQUIREMENTS), "pydantic_ai: package index unreachable")
    done = subprocess.run([str(venv / "bin" / "python"), str(SCRIPT)], capture_output=True, text=True, timeout=180,
                          env={"PYTHONPATH": str(source_path()), "PATH": "/usr/bin:/bin",
                               "OTEL_PROGRESS_DETECTION_EVENTS": "span"}, check=False)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["tool_spans"] == 8
    # where pydantic-ai 2.68 puts the event: the tool span (after_tool_execute), the model
    # request's chat span (after_model_request), never the agent run span
    assert out["verdicts"] == [["execute_tool search_docs", "error_cycle"],
                               ["chat function:model:", "exact_repetition"]]
    assert out["detections"] == [
        ["repeat_cycle", 2, None, None],  # ours first: made before any verdict, as it was
        ["repeat_cycle", 4, HARNESS, "error_cycle"],  # after the third identical result
        ["repeat_cycle", 6, HARNESS, "exact_repetition"],  # after the fifth identical call
    ]
