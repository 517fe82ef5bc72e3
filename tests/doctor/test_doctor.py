"""``otel-progress doctor`` run for real: in this virtualenv, with test instrumentor
distributions, and watching real runs under ``opentelemetry-instrument``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import BIN, clean_env, doctor

HERE = Path(__file__).parent
AGENT = HERE / "scripts" / "genai_agent.py"
CONTENT = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
           "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}

pytestmark = pytest.mark.timeout(300)


def _json(proc) -> dict:
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def _instrumentor(report: dict, name: str) -> dict:
    (row,) = [r for r in report["instrumentors"] if r["name"] == name]
    return row


def test_environment_report_in_this_venv() -> None:
    proc = doctor("--format", "json", env=clean_env(**CONTENT))
    report = _json(proc)
    assert proc.returncode == 0, report["findings"]
    assert report["findings"] == [] and report["exit_status"] == 0
    assert _instrumentor(report, "progress")["status"] == "loads"
    assert _instrumentor(report, "langchain")["status"] == "loads"  # openinference, langchain-core installed
    # opentelemetry-util-genai is installed here (a test dependency), but no instrumentation uses it
    assert not [c for c in report["content"] if c["instrumentation"].startswith("OpenTelemetry GenAI")]
    assert report["opentelemetry_instrument"] == str(BIN / "opentelemetry-instrument")


def test_util_genai_installed_alone_is_no_content_problem(test_dists: Callable[..., Path]) -> None:
    # This virtualenv has opentelemetry-util-genai (a test dependency) and no instrumentation
    # built on it: its content setting concerns no span, so "true" (no content) is no finding.
    proc = doctor("--format", "json", env=clean_env(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true"))
    report = _json(proc)
    assert not [c for c in report["content"] if c["instrumentation"].startswith("OpenTelemetry GenAI")]
    assert not [f for f in report["findings"] if "CAPTURE_MESSAGE_CONTENT" in f["message"]], report["findings"]
    # with an instrumentation that requires it, the setting is judged again
    dists = test_dists("genai_user")
    proc = doctor("--format", "json", env=clean_env(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true",
                                                    PYTHONPATH=str(dists)))
    genai = [c for c in _json(proc)["content"] if c["instrumentation"].startswith("OpenTelemetry GenAI")]
    assert genai and genai[0]["capture"] == "no"
    proc = doctor("--format", "json", env=clean_env(**CONTENT, PYTHONPATH=str(dists)))
    genai = [c for c in _json(proc)["content"] if c["instrumentation"].startswith("OpenTelemetry GenAI")]
    assert genai and genai[0]["capture"] == "yes"


def test_capture_true_means_no_content_and_the_fix_is_named(test_dists: Callable[..., Path]) -> None:
    env = clean_env(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true", PYTHONPATH=str(test_dists("genai_user")))
    proc = doctor(env=env)
    assert proc.returncode == 1
    assert "not a mode" in proc.stdout
    assert "fix: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_missing_exporter_and_disabled_progress_are_errors() -> None:
    proc = doctor("--format", "json", env=clean_env(**CONTENT, OTEL_TRACES_EXPORTER="zipkin_json",
                                                    OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="progress"))
    report = _json(proc)
    assert proc.returncode == 1
    messages = " ".join(f["message"] for f in report["findings"] if f["severity"] == "error")
    assert "zipkin_json" in messages and "disabled" in messages
    assert _instrumentor(report, "progress")["status"] == "disabled"


def test_bad_progress_setting_is_reported_by_name() -> None:
    proc = doctor("--format", "json", env=clean_env(**CONTENT, OTEL_PROGRESS_WINDOW="ten"))
    report = _json(proc)
    assert proc.returncode == 1
    (finding,) = [f for f in report["findings"] if f["topic"] == "processor"]
    assert "window" in finding["message"].lower()


def test_raising_instrumentor_stops_the_ones_after_it(test_dists: Callable[..., Path]) -> None:
    dists = test_dists("raises", "needs_lib")
    proc = doctor("--format", "json", env=clean_env(**CONTENT, PYTHONPATH=str(dists)))
    report = _json(proc)
    assert proc.returncode == 1
    names = [r["name"] for r in report["instrumentors"]]
    raising = names.index("doctor_test_raises")
    assert _instrumentor(report, "doctor_test_raises")["status"] == "raises"
    assert "AttributeError" in _instrumentor(report, "doctor_test_raises")["detail"]
    # everything after it is never loaded by opentelemetry-instrument
    assert all(r["status"] == "not_reached" for r in report["instrumentors"][raising + 1:])
    errors = [f["message"] for f in report["findings"] if f["severity"] == "error"]
    assert any("doctor_test_raises" in m and "not loaded after it" in m for m in errors), errors
    if names.index("progress") > raising:
        assert any("progress instrumentor is never loaded" in m for m in errors), errors


def test_instrumentor_missing_its_library_is_skipped_loudly(test_dists: Callable[..., Path]) -> None:
    dists = test_dists("needs_lib")
    proc = doctor("--format", "json", env=clean_env(**CONTENT, PYTHONPATH=str(dists)))
    report = _json(proc)
    row = _instrumentor(report, "doctor_test_needs_lib")
    assert row["status"] == "skipped" and "doctor-absent-lib" in row["detail"]
    assert proc.returncode == 1
    assert any("doctor_test_needs_lib" in f["message"] for f in report["findings"] if f["severity"] == "warning")


def test_watched_run_with_content_counts_tool_spans_and_detections() -> None:
    proc = doctor("--format", "json", "--timeout", "120", "--", str(BIN / "python"), str(AGENT),
                  env=clean_env(**CONTENT))
    report = _json(proc)
    run = report["run"]
    assert report["returncode"] == 0
    assert run["processor"]["installed"] is True
    assert run["processor"]["wraps"], run["processor"]  # the console exporter's processor
    assert run["tool_spans"] == 5
    assert run["tool_spans_with_arguments"] == 5 and run["tool_spans_with_result"] == 5
    assert run["detections"] and run["detections"][0]["reason"] == "repeat_cycle"
    assert run["tool_spans_annotated"] >= 1
    assert "progress" in run["instrumented"]
    assert proc.returncode == 0, report["findings"]
    # the agent's own output went to stderr in json mode; stdout is the report alone
    assert "done" in proc.stderr
    # every key of the report is documented
    docs = (HERE.parents[1] / "docs" / "doctor.md").read_text()
    keys = set(report) | set(run) | set(run["processor"]) | set(run["tools"][0]) | set(report["instrumentors"][0])
    undocumented = sorted(k for k in keys if not re.search(rf"\b{k}\b", docs))
    assert not undocumented, undocumented


def test_watched_run_without_content_names_the_setting() -> None:
    proc = doctor("--", str(BIN / "python"), str(AGENT),
                  env=clean_env(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true"))
    assert proc.returncode == 1
    out = proc.stdout
    assert "tool spans: 5, with arguments: 0, with a result: 0" in out
    assert "5 of 5 tool spans carried no arguments or result" in out
    assert "SPAN_ONLY" in out and "detections: 0" in out
    assert "Traceback" not in out + proc.stderr


def test_users_own_hook_still_runs(tmp_path: Path) -> None:
    hook = tmp_path / "userhook.py"
    marker = tmp_path / "called"
    hook.write_text(f"def hook(d):\n    open({str(marker)!r}, 'a').write(d.reason.value + '\\n')\n")
    env = clean_env(**CONTENT, PYTHONPATH=str(tmp_path), OTEL_PROGRESS_ON_DETECTION="userhook:hook")
    proc = doctor("--format", "json", "--", str(BIN / "python"), str(AGENT), env=env)
    report = _json(proc)
    assert report["run"]["detections"]
    assert marker.read_text().splitlines()[0] == "repeat_cycle"


def test_command_not_found_and_bad_usage_exit_2_without_traceback() -> None:
    for args in (["--", "/nonexistent/bin/python", "x.py"], ["--", "no-such-command-xyz"], ["--"],
                 ["--timeout", "0", "--", "true"], ["--frobnicate"]):
        proc = doctor(*args, env=clean_env(**CONTENT))
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stdout + proc.stderr, args
        assert proc.stderr.strip(), args


def test_timeout_stops_the_command() -> None:
    start = time.monotonic()
    proc = doctor("--timeout", "3", "--", str(BIN / "python"), "-c", "import time; time.sleep(120)",
                  env=clean_env(**CONTENT), timeout=120)
    assert time.monotonic() - start < 90
    assert proc.returncode == 1
    assert "did not finish within 3 s" in proc.stdout


def test_a_command_already_under_opentelemetry_instrument_keeps_its_options() -> None:
    env = clean_env(**CONTENT)
    del env["OTEL_TRACES_EXPORTER"]  # given as the launcher's option instead
    proc = doctor("--format", "json", "--", str(BIN / "opentelemetry-instrument"), "--traces_exporter", "console",
                  str(BIN / "python"), str(AGENT), env=env)
    report = _json(proc)
    assert report["command"] == [str(BIN / "python"), str(AGENT)]
    assert report["run"]["tool_spans"] == 5
    assert report["run"]["processor"]["wraps"] == ["BatchSpanProcessor(ConsoleSpanExporter)"]


CHAT_AGENT = HERE / "scripts" / "genai_chat_agent.py"


def _doctor_here(*args: str, env: dict[str, str]) -> dict:
    """The doctor of this source tree (``python -m otel_progress.cli``, the tree first on the
    path of the doctor, its probe and the watched run), as JSON."""
    proc = subprocess.run([sys.executable, "-m", "otel_progress.cli", "doctor", "--format", "json", *args],
                          env={**env, "PYTHONPATH": str(HERE.parents[1])}, capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL, check=False)
    return _json(proc)


def test_inference_spans_without_output_name_the_setting() -> None:
    # the inference spans carry gen_ai.output.messages only when the capture settings say so
    # (opentelemetry-util-genai InferenceInvocation, as for its tool spans)
    bare = _doctor_here("--", str(BIN / "python"), str(CHAT_AGENT), env=clean_env())
    run = bare["run"]
    assert (run["model_spans"], run["model_spans_with_output"]) == (3, 0)
    assert run["model_bare"]["name"] == "chat scripted"
    (finding,) = [f for f in bare["findings"] if "inference span" in f["message"]]
    assert finding["severity"] == "warning" and finding["topic"] == "content"
    assert "3 inference span(s)" in finding["message"]
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY" in finding["message"]
    full = _doctor_here("--", str(BIN / "python"), str(CHAT_AGENT), env=clean_env(**CONTENT))
    run = full["run"]
    assert (run["model_spans"], run["model_spans_with_output"], run["model_bare"]) == (3, 3, None)
    assert not [f for f in full["findings"] if "inference span" in f["message"]]
