"""``otel-progress doctor`` inside a framework virtualenv of the matrix (Agno with
OpenInference, built and cached by the matrix harness), watching the real agent; and in a
virtualenv where OpenLLMetry's MCP instrumentor raises at start (on ``mcp`` 2.x)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests._matrix.rows import load_script
from tests.frameworks.harness import SETUPS_DIR, BuildError, agent_env, build_venv, discover, in_ci

pytestmark = pytest.mark.timeout(2400)  # may build the virtualenv first


#: Tool calls the scripted model makes in the loop scenario (``_common/scripted.py``).
LOOP = int(load_script().LOOP_TURNS)


@pytest.fixture(scope="module")
def agno() -> tuple[Path, object]:
    (setup,) = [s for s in discover() if s.framework == "agno" and s.name == "openinference"]
    try:
        return build_venv(setup.requirements_path), setup
    except BuildError as exc:
        if exc.network and not in_ci():
            pytest.skip(f"package index unreachable, cannot build the Agno virtualenv: {exc}")
        raise


def _doctor(venv: Path, setup: object, scenario: str | None, **extra: str) -> tuple[int, dict]:
    env = agent_env(setup)  # the matrix's environment: console export, no real network
    env.update(extra)
    command = ["--", str(venv / "bin" / "python"), "agent.py", scenario] if scenario else []
    proc = subprocess.run([str(venv / "bin" / "otel-progress"), "doctor", "--format", "json", "--timeout", "200",
                           *command],
                          cwd=SETUPS_DIR / "agno", env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, check=False)
    assert "Traceback" not in proc.stdout
    return proc.returncode, json.loads(proc.stdout)


def test_doctor_sees_the_agno_loop(agno: tuple[Path, object]) -> None:
    venv, setup = agno
    code, report = _doctor(venv, setup, "loop")
    statuses = {r["name"]: r["status"] for r in report["instrumentors"]}
    assert statuses.get("agno") == "loads" and statuses.get("progress") == "loads"
    assert [c["capture"] for c in report["content"] if c["instrumentation"] == "OpenInference"] == ["yes"]
    run = report["run"]
    assert set(run["instrumented"]) >= {"agno", "progress"}
    assert run["tool_spans"] == LOOP and run["tool_spans_with_arguments"] == LOOP
    assert run["tool_spans_with_result"] == LOOP
    assert run["detections"] and {d["tool"] for d in run["detections"]} == {"lookup_order"}
    assert code == 0, report["findings"]


def test_doctor_names_openinference_settings_when_content_is_hidden(agno: tuple[Path, object]) -> None:
    venv, setup = agno
    code, report = _doctor(venv, setup, "loop", OPENINFERENCE_HIDE_INPUTS="true", OPENINFERENCE_HIDE_OUTPUTS="true")
    assert code == 1
    run = report["run"]
    assert run["tool_spans"] == LOOP and run["tool_spans_with_result"] == 0
    assert run["detections"] == []
    text = " ".join(f["message"] + " " + f["fix"] for f in report["findings"])
    assert "OPENINFERENCE_HIDE_INPUTS=false" in text
    assert f"{LOOP} of {LOOP} tool spans carried no arguments or result" in text


@pytest.fixture(scope="module")
def mcp2(agno: tuple[Path, object]) -> Path:
    try:
        return build_venv(Path(__file__).parent / "requirements-mcp2.txt")
    except BuildError as exc:
        if exc.network and not in_ci():
            pytest.skip(f"package index unreachable, cannot build the MCP 2 virtualenv: {exc}")
        raise


def test_a_raising_instrumentor_is_named_and_what_it_stops_is_seen(mcp2: Path, agno: tuple[Path, object]) -> None:
    _, setup = agno
    code, report = _doctor(mcp2, setup, None)
    assert code == 1
    rows = report["instrumentors"]
    names = [r["name"] for r in rows]
    (mcp,) = [r for r in rows if r["name"] == "mcp"]
    assert mcp["status"] == "raises" and mcp["distribution"] == "opentelemetry-instrumentation-mcp"
    after = rows[names.index("mcp") + 1:]
    assert all(r["status"] == "not_reached" for r in after)
    # the watched run agrees: what came after the MCP instrumentor is not instrumented
    code, report = _doctor(mcp2, setup, "loop")
    run = report["run"]
    agno_stopped = "agno" in [r["name"] for r in after]
    assert ("agno" in run["instrumented"]) is not agno_stopped
    assert (run["tool_spans"] == 0) is agno_stopped
    assert any("raises at instrument()" in f["message"] for f in report["findings"] if f["severity"] == "error")
    # disabling it, as the fix says, brings the tool spans back
    code, report = _doctor(mcp2, setup, "loop", OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="mcp")
    assert report["run"]["tool_spans"] == LOOP and report["run"]["detections"]
    assert code == 0, report["findings"]


def test_adk_capture_true_is_named_from_the_tool_spans_scope() -> None:
    # ADK's native spans carry no convention marker of their own; the advice comes from the
    # instrumentation scope (gcp.vertex.agent): `true` means EVENT_ONLY there
    (setup,) = [s for s in discover() if s.framework == "google_adk" and s.name == "native"]
    try:
        venv = build_venv(setup.requirements_path)
    except BuildError as exc:
        if exc.network and not in_ci():
            pytest.skip(f"package index unreachable, cannot build the ADK virtualenv: {exc}")
        raise
    env = agent_env(setup)
    env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
    proc = subprocess.run([str(venv / "bin" / "otel-progress"), "doctor", "--format", "json", "--timeout", "200",
                           "--", str(venv / "bin" / "python"), "agent.py", "loop"],
                          cwd=SETUPS_DIR / "google_adk", env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, check=False)
    report = json.loads(proc.stdout)
    assert proc.returncode == 1
    run = report["run"]
    assert run["tool_spans"] == LOOP and run["tool_spans_with_arguments"] == 0 and run["detections"] == []
    (finding,) = [f for f in report["findings"] if f["severity"] == "error" and f["topic"] == "content"]
    assert "Google ADK (native)" in finding["message"] and "EVENT_ONLY" in finding["message"]
    assert "set OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY" in finding["message"]
