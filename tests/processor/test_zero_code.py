"""Zero-code enablement: real scripts under ``opentelemetry-instrument`` in a subprocess,
configured by environment variables or by ``OTEL_CONFIG_FILE``."""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_progress.demo import ScriptedAgent
from otel_progress.instrument import ProgressInstrumentor

from .conftest import ROOT, SCRIPTS, console_spans, docs_loop, json_objects, progress_events, run_script

EXAMPLES = ROOT / "examples" / "zero_code"
INSTRUMENT = str(Path(sys.executable).parent / "opentelemetry-instrument")
BASE_ENV = {
    "OTEL_TRACES_EXPORTER": "console",
    "OTEL_METRICS_EXPORTER": "console",
    "OTEL_LOGS_EXPORTER": "none",
    "OTEL_SERVICE_NAME": "zero-code-test",
}


def _instrumented(script: str, env: dict[str, str] | None = None, cwd: Path = EXAMPLES) -> Any:
    proc = run_script([INSTRUMENT, sys.executable, script], {**BASE_ENV, **(env or {})}, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _events(span: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in span.get("events", []) if e["name"] in ("no_progress", "livelock")]


def _metric_points(text: str, name: str) -> list[tuple[dict[str, Any], Any]]:
    out = []
    for obj in json_objects(text):
        for rm in obj.get("resource_metrics", []) if isinstance(obj, dict) else []:
            for sm in rm.get("scope_metrics", []):
                for metric in sm.get("metrics", []):
                    if metric["name"] == name:
                        out += [(p["attributes"], p.get("value")) for p in metric["data"]["data_points"]]
    return out


@pytest.mark.parametrize("analysis", ["default", "inline", "background"])
def test_looping_agent_is_annotated_with_no_code_change(analysis: str) -> None:
    # default: auto, which is background here (the exporting processor is wrapped, no hook);
    # background: the worker's queue is drained by the SDK's shutdown at exit
    proc = _instrumented("looping_agent.py", {} if analysis == "default" else {"OTEL_PROGRESS_ANALYSIS": analysis})
    assert "answer: I could not find the refund policy." in proc.stdout
    spans = console_spans(proc.stdout)
    tools = [s for s in spans if s["name"] == "execute_tool search_docs"]
    assert len(tools) == 8
    flagged = [(i + 1, s) for i, s in enumerate(tools) if _events(s)]
    assert [turn for turn, _ in flagged] == [4, 8]  # level 1, then level 2
    for turn, span in flagged:
        (event,) = _events(span)
        assert event["attributes"]["progress.turn"] == turn
        assert span["attributes"]["progress.detected"] is True
        assert span["attributes"]["progress.reason"] == "barren"
    levels = [s["attributes"]["progress.level"] for _, s in flagged]
    assert levels == [1, 2]
    agent = next(s for s in spans if s["name"] == "invoke_agent docs-agent")
    assert [e["attributes"]["progress.turn"] for e in _events(agent)] == [4, 8]
    points = _metric_points(proc.stdout, "progress.detections")
    assert sorted((p["progress.level"], v) for p, v in points) == [(1, 1), (2, 1)]
    assert {p["gen_ai.agent.name"] for p, _ in points} == {"docs-agent"}
    assert _metric_points(proc.stdout, "progress.wasted.turns")[0][1] == 4
    assert "otel-progress" not in proc.stderr  # no warning, no error


def test_healthy_agent_is_left_alone() -> None:
    proc = _instrumented("healthy_agent.py")
    spans = console_spans(proc.stdout)
    assert len(spans) == 18
    assert not any(_events(s) or "progress.detected" in s["attributes"] for s in spans)


def test_disabled_with_the_standard_variable() -> None:
    proc = _instrumented("looping_agent.py", {"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "progress"})
    spans = console_spans(proc.stdout)
    assert len(spans) == 18
    assert not any(_events(s) for s in spans)
    assert _metric_points(proc.stdout, "progress.detections") == []


def test_configured_by_environment_variables() -> None:
    env = {
        "OTEL_PROGRESS_BARREN_THRESHOLD": "6",
        "OTEL_PROGRESS_ON_DETECTION": "hooks:print_nudge",
        "PYTHONPATH": str(SCRIPTS),
    }
    proc = _instrumented("looping_agent.py", env)
    tools = [s for s in console_spans(proc.stdout) if s["name"] == "execute_tool search_docs"]
    assert [i + 1 for i, s in enumerate(tools) if _events(s)] == [6]
    assert "HOOK level=1 turn=6 nudge='Progress watchdog notice (turn 6): 6 ste'" in proc.stderr


def test_bad_configuration_is_reported_and_the_app_still_runs() -> None:
    proc = _instrumented("looping_agent.py", {"OTEL_PROGRESS_WINDOW": "ten"})
    assert "answer: I could not find the refund policy." in proc.stdout
    assert "otel-progress: not enabled" in proc.stderr and "OTEL_PROGRESS_WINDOW" in proc.stderr
    assert not any(_events(s) for s in console_spans(proc.stdout))


def _declarative_supported() -> bool:
    if importlib.util.find_spec("opentelemetry.configuration") is None:
        return False
    from opentelemetry.sdk import environment_variables

    return hasattr(environment_variables, "OTEL_CONFIG_FILE")


@pytest.mark.skipif(not _declarative_supported(), reason="SDK without OTEL_CONFIG_FILE support"
                    " or opentelemetry-configuration not installed")
def test_configured_by_otel_config_file() -> None:
    proc = _instrumented("looping_agent.py", {"OTEL_CONFIG_FILE": "otel-config.yaml"})
    spans = console_spans(proc.stdout)
    tools = [s for s in spans if s["name"] == "execute_tool search_docs"]
    assert len(tools) == 8
    # barren_threshold: 5 from the file's instrumentation/development.python.progress
    assert [i + 1 for i, s in enumerate(tools) if _events(s)] == [5]
    flagged = next(s for s in tools if _events(s))
    assert flagged["attributes"]["progress.reason"] == "barren"
    agent = next(s for s in spans if s["name"] == "invoke_agent docs-agent")
    assert [e["attributes"]["progress.turn"] for e in _events(agent)] == [5]
    assert _metric_points(proc.stdout, "progress.detections")
    assert "already instrumented" not in proc.stderr


@pytest.mark.skipif(not _declarative_supported(), reason="SDK without OTEL_CONFIG_FILE support")
def test_config_file_can_disable_it(tmp_path: Path) -> None:
    text = (EXAMPLES / "otel-config.yaml").read_text().replace(
        "      barren_threshold: 5\n", "      enabled: false\n")
    (tmp_path / "otel-config.yaml").write_text(text)
    (tmp_path / "manifest.json").write_text((EXAMPLES / "manifest.json").read_text())
    env = {"OTEL_CONFIG_FILE": str(tmp_path / "otel-config.yaml"),
           # the declarative file decides; keep the env-var path from turning it on again
           "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "progress"}
    proc = _instrumented(str(EXAMPLES / "looping_agent.py"), env, cwd=tmp_path)
    assert not any(_events(s) for s in console_spans(proc.stdout))


# -- in-process: the wrapping and its fallback ------------------------------------------------


class _ListMulti(SpanProcessor):
    """An active span processor that is not the SDK's: nothing to wrap."""

    def __init__(self) -> None:
        self.processors: list[SpanProcessor] = []

    def add_span_processor(self, processor: SpanProcessor) -> None:
        self.processors.append(processor)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        for p in self.processors:
            p.on_start(span, parent_context=parent_context)

    def _on_ending(self, span: Any) -> None:
        for p in self.processors:
            p._on_ending(span)

    def on_end(self, span: ReadableSpan) -> None:
        for p in self.processors:
            p.on_end(span)


@pytest.fixture
def instrumentor() -> Any:
    inst = ProgressInstrumentor()
    yield inst
    inst.uninstrument()


def test_instrument_wraps_the_exporting_processors(instrumentor: Any) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    export = SimpleSpanProcessor(exporter)
    provider.add_span_processor(export)
    instrumentor.instrument(tracer_provider=provider, barren_threshold=3)
    assert provider._active_span_processor._span_processors == (instrumentor.processor,)
    assert instrumentor.processor.wrapped == (export,)
    assert instrumentor.processor.analysis == "background"  # no hook: off the application thread
    docs_loop(ScriptedAgent(provider.get_tracer("t")), turns=4)
    instrumentor.processor.force_flush()
    flagged = [s for s in exporter.get_finished_spans() if progress_events(s)]
    assert {s.name for s in flagged} == {"execute_tool search_docs", "invoke_agent docs-agent"}
    instrumentor.uninstrument()
    assert provider._active_span_processor._span_processors == (export,)


def test_instrument_falls_back_to_agent_spans_with_one_warning(
        instrumentor: Any, caplog: pytest.LogCaptureFixture) -> None:
    exporter = InMemorySpanExporter()
    active = _ListMulti()
    provider = TracerProvider(active_span_processor=active, shutdown_on_exit=False)  # type: ignore[arg-type]
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with caplog.at_level(logging.WARNING, logger="otel_progress.instrument"):
        instrumentor.instrument(tracer_provider=provider)
        assert instrumentor.processor.analysis == "inline"  # nothing wrapped: annotated as they end
        for _ in range(3):
            docs_loop(ScriptedAgent(provider.get_tracer("t")), turns=5)
    warnings = [r for r in caplog.records if r.name == "otel_progress.instrument"]
    assert len(warnings) == 1 and "agent spans only" in warnings[0].getMessage()
    flagged = [s for s in exporter.get_finished_spans() if progress_events(s)]
    assert flagged and {s.name for s in flagged} == {"invoke_agent docs-agent"}
    assert len(flagged) == 3
    os.environ.pop("OTEL_PROGRESS_WINDOW", None)
