"""Fault tests: spans that never end, and values of any size, through the real SDK.

Every table the processor keeps is bounded by its limit whatever the application does;
a span the application drops without ending it is forgotten; and every free-text value
that reaches the exported telemetry (metric attributes, event attributes) is cut to its
documented limit (otel_progress.model.limits)."""

from __future__ import annotations

import gc
import json
import logging
import tracemalloc
from typing import Any

import pytest
from opentelemetry import trace

from otel_progress import Config
from otel_progress.model.limits import MAX_ATTRIBUTE_BYTES, MAX_METRIC_CHARS

from .conftest import Rig, make_rig, progress_events

MAX_SPANS = 500
MAX_RUNS = 100


def _tables(r: Rig) -> dict[str, int]:
    p = r.processor
    t = p._tracker
    out = {"spans": len(t.spans), "roots": len(t.roots), "traces": len(t.traces), "engine runs": p.active_runs}
    if p._handoff is not None:
        out["watched"] = len(p._handoff._watched)
    return out


def _never_ended(tracer: trace.Tracer, n: int, keep: list[Any] | None) -> None:
    """``n`` of each: plain roots, agent spans with one ended tool call, tool spans and
    plain spans inside a run: none of them ends."""
    for i in range(n):
        root = tracer.start_span("GET /api", attributes={"http.method": "GET"})
        agent = tracer.start_span("invoke_agent a", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"agent-{i % 7}"})
        with trace.use_span(agent):
            with tracer.start_as_current_span("execute_tool t", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
                    "gen_ai.tool.call.arguments": json.dumps({"id": i}), "gen_ai.tool.call.result": "[]"}):
                pass
            tool = tracer.start_span("execute_tool hung", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "hung"})
            step = tracer.start_span("plan step")
        if keep is not None:
            keep.extend((root, agent, tool, step))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("analysis", ["inline", "background"])
@pytest.mark.parametrize("held", [False, True], ids=["dropped", "held-by-the-application"])
def test_never_ended_spans_stay_within_every_limit(analysis: str, held: bool) -> None:
    r = make_rig(Config(max_runs=MAX_RUNS), analysis=analysis, max_spans=MAX_SPANS, on_detection=None)
    keep: list[Any] | None = [] if held else None
    tracer = r.provider.get_tracer("tests")
    peak: dict[str, int] = {}
    for _ in range(6):
        _never_ended(tracer, 1000, keep)
        r.processor.force_flush()
        for name, size in _tables(r).items():
            peak[name] = max(peak.get(name, 0), size)
    limits = {"spans": MAX_SPANS, "roots": MAX_SPANS, "traces": MAX_RUNS, "engine runs": MAX_RUNS,
              "watched": MAX_SPANS, "watched roots": MAX_SPANS}
    assert all(peak[name] <= limits[name] for name in peak), (peak, limits)
    assert r.processor.open_spans <= 2 * MAX_SPANS
    assert r.processor.processor_errors == 0
    if not held:
        # the application dropped them: the agent and root spans are forgotten at once
        # (what is left: the hung tool and plan-step entries, until the table trims them)
        gc.collect()
        with tracer.start_as_current_span("invoke_agent next", attributes={"gen_ai.operation.name": "invoke_agent"}):
            pass
        r.processor.force_flush()
        tables = _tables(r)
        assert tables["roots"] <= 1, tables
        assert sum(1 for e in r.processor._tracker.spans.values() if e[2] == 2) <= 1  # (2: agent entries)
        assert all(not t.runs or set(t.runs) == {""} for t in r.processor._tracker.traces.values())
    r.provider.shutdown()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("analysis", ["inline", "background"])
def test_a_one_mib_tool_name_is_cut_in_every_exported_value(analysis: str, caplog: pytest.LogCaptureFixture) -> None:
    big_tool = "t" * (1 << 20)
    big_agent = "é" * (1 << 20)  # (two bytes per character)
    r = make_rig(analysis=analysis, on_detection=None if analysis == "background" else (lambda d: None))
    tracer = r.provider.get_tracer("tests")
    with tracer.start_as_current_span("invoke_agent big", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": big_agent}):
        for i in range(6):
            with tracer.start_as_current_span("execute_tool big", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": big_tool,
                    "gen_ai.tool.call.arguments": json.dumps({"q": f"v{i}"}),
                    "gen_ai.tool.call.result": json.dumps({"results": []})}):
                pass
    spans = r.spans()
    assert r.processor.processor_errors == 0
    events = [attrs for s in spans for _, attrs in progress_events(s)]
    assert events, "the loop was not detected"
    for attrs in events:
        for value in attrs.values():
            if isinstance(value, str):
                assert len(value.encode()) <= MAX_ATTRIBUTE_BYTES
        assert attrs["progress.tool"].startswith("ttt") and attrs["progress.tool"].endswith("…")
    points = r.metrics()["progress.detections"]
    assert points
    for attrs, _ in points:
        assert all(len(v) <= MAX_METRIC_CHARS for v in attrs.values() if isinstance(v, str))
        assert attrs["gen_ai.tool.name"].endswith("…") and attrs["gen_ai.agent.name"].startswith("éé")
    r.provider.shutdown()


def _tool_loop(r: Rig, n: int, content: bool, marker: dict[str, Any]) -> None:
    tracer = r.provider.get_tracer("tests")
    with tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}):
        for i in range(n):
            attrs = dict(marker)
            if content:
                attrs.update({"gen_ai.tool.call.arguments": json.dumps({"i": i}), "gen_ai.tool.call.result": "ok"})
            with tracer.start_as_current_span("execute_tool t", attributes=attrs):
                pass
    r.processor.force_flush()


GENAI = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"}
OPENINFERENCE = {"openinference.span.kind": "TOOL", "tool.name": "t"}


@pytest.mark.parametrize("analysis", ["inline", "background"])
def test_one_warning_when_tool_spans_keep_arriving_without_content(
        analysis: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    caplog.set_level(logging.WARNING, logger="otel_progress")
    r = make_rig(analysis=analysis, on_detection=None if analysis == "background" else (lambda d: None))
    _tool_loop(r, 9, False, GENAI)
    # fewer than 10: not the process-wide warning, but the run is said to be unchecked, once
    assert not [x for x in caplog.records if "the first" in x.getMessage()]
    per_run = [x.getMessage() for x in caplog.records if "tool span(s) of run" in x.getMessage()]
    assert len(per_run) == 1 and "the 9 tool span(s)" in per_run[0] and "SPAN_ONLY" in per_run[0]
    _tool_loop(r, 30, False, GENAI)
    warnings = [x for x in caplog.records if "the first" in x.getMessage()]
    assert len(warnings) == 1
    assert len([x for x in caplog.records if "tool span(s) of run" in x.getMessage()]) == 1  # (said once)
    message = warnings[0].getMessage()
    assert warnings[0].name.startswith("otel_progress") and warnings[0].levelno == logging.WARNING
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in message and "SPAN_ONLY" in message
    r.provider.shutdown()


def test_the_warning_names_the_instrumentation_that_made_the_spans(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="otel_progress")
    r = make_rig(analysis="inline")
    _tool_loop(r, 12, False, OPENINFERENCE)
    warnings = [x.getMessage() for x in caplog.records if "no arguments or results" in x.getMessage()]
    assert len(warnings) == 1 and "OPENINFERENCE_HIDE" in warnings[0]
    r.provider.shutdown()


def test_a_run_without_any_tool_span_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    # smolagents' own instrumentation, CrewAI through OpenLLMetry: GenAI spans, no tool span read
    caplog.set_level(logging.WARNING, logger="otel_progress")
    r = make_rig(analysis="inline")
    tracer = r.provider.get_tracer("smolagents")
    for _ in range(2):
        with tracer.start_as_current_span("CodeAgent.run", attributes={"openinference.span.kind": "AGENT"}):
            for _ in range(3):
                with tracer.start_as_current_span("Step", attributes={"openinference.span.kind": "CHAIN"}), \
                        tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat",
                                                                         "gen_ai.usage.input_tokens": 5}):
                    pass
    r.processor.force_flush()
    said = [x.getMessage() for x in caplog.records if "but no tool span" in x.getMessage()]
    assert len(said) == 1 and "smolagents" in said[0]  # the second run within the minute: counted
    assert r.processor._content.runs_unchecked == 2
    with tracer.start_as_current_span("plain root"):  # a run with no GenAI span at all: nothing to say
        pass
    assert r.processor._content.runs_unchecked == 2
    r.provider.shutdown()


def test_no_warning_once_tool_spans_carry_content(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="otel_progress")
    r = make_rig(analysis="inline")
    _tool_loop(r, 3, True, GENAI)
    _tool_loop(r, 40, False, GENAI)  # (content capture turned off later: not this warning's case)
    assert not [x for x in caplog.records if "the first" in x.getMessage()]
    r.provider.shutdown()


def _ended_tool_runs(tracer: trace.Tracer, start: int, n: int) -> None:
    """``n`` agent runs whose agent span never ends (the application drops it), each with
    one ended tool call that carries content."""
    for i in range(start, start + n):
        agent = tracer.start_span("invoke_agent a", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"agent-{i % 7}"})
        with trace.use_span(agent), tracer.start_as_current_span("execute_tool t", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.arguments": json.dumps({"id": i}),
                "gen_ai.tool.call.result": json.dumps({"status": "ok", "n": i})}):
            pass


@pytest.mark.timeout(300)
@pytest.mark.parametrize("analysis", ["inline", "background"])
def test_never_ended_runs_with_content_do_not_grow_memory(analysis: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28, item 2: past every table's bound, more never-ended runs with content add
    nothing that stays (measured with tracemalloc over everything the process allocates),
    and the content watch's table stays within its bound (made smaller here for speed)."""
    from otel_progress.processor import content

    bound = 1000
    monkeypatch.setattr(content, "MAX_TRACKED_RUNS", bound)
    r = make_rig(Config(max_runs=MAX_RUNS), analysis=analysis, max_spans=MAX_SPANS, on_detection=None)
    tracer = r.provider.get_tracer("tests")
    batch = bound + 1000
    traced = []
    tracemalloc.start()
    try:
        for k in range(3):  # the first batch fills every table: the next ones only replace entries
            _ended_tool_runs(tracer, k * batch, batch)
            r.processor.force_flush()
            r.exporter.clear()  # (the in-memory exporter keeps every ended span: not the processor's)
            gc.collect()
            traced.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    kept = traced[2] - traced[1]
    # before the bound, the content watch kept ~150 B per run for ever (~300 KB here)
    assert kept < 16 * batch, (kept, traced)
    assert len(r.processor._content._runs) <= bound
    assert r.processor.processor_errors == 0
    r.provider.shutdown()
