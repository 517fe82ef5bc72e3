"""The processor in the real SDK: where detections land, state, errors, metrics."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_progress import Config, ProgressEngine, ProgressSpanProcessor
from otel_progress.conventions.spans import SpanRecord
from otel_progress.demo import DEMO_MANIFEST, SCENARIOS
from otel_progress.engine.manifest import parse_manifest
from otel_progress.scan.analyse import analyse_trace

from .conftest import BrokenEngine, ExplodingProcessor, Rig, docs_loop, make_rig, progress_attrs, progress_events

_OUTPUT_KEYS = ("progress.detected", "progress.reason", "progress.level")


def test_loop_is_annotated_on_the_tool_span_and_the_agent_span(rig: Rig) -> None:
    docs_loop(rig.agent(), turns=6)
    assert len(rig.detections) == 1
    det = rig.detections[0]
    assert (det.reason.value, det.turn, int(det.level)) == ("barren", 4, 1)
    assert det.agent == "docs-agent" and det.tool == "search_docs"
    assert "hypothesis" not in det.nudge.lower() or det.nudge  # the text is there
    assert "write down what you believe is blocking progress" in det.nudge
    assert "What was tried and did not work" in det.handoff

    spans = rig.by_id()
    tool = spans[det.span_id]
    assert tool.name == "execute_tool search_docs"
    assert progress_attrs(tool) == {"progress.detected": True, "progress.reason": "barren", "progress.level": 1}
    assert progress_events(tool) == [("no_progress", det.event_attributes())]
    assert tool.events[-1].timestamp == tool.end_time

    agent = next(s for s in rig.spans() if s.name == "invoke_agent docs-agent")
    assert progress_events(agent) == [("no_progress", det.event_attributes())]
    assert progress_attrs(agent)["progress.detected"] is True

    # Only that tool span carries it.
    others = [s for s in rig.spans() if s is not tool and s is not agent]
    assert all(not progress_attrs(s) and not progress_events(s) for s in others)
    # Everything is freed once the run (and its trace) ended.
    assert (rig.processor.open_spans, rig.processor.tracked_traces, rig.processor.active_runs) == (0, 0, 0)


def test_healthy_run_is_left_alone(rig: Rig) -> None:
    docs_loop(rig.agent(), turns=10, healthy=True)
    assert rig.detections == []
    assert all(not progress_attrs(s) and not progress_events(s) for s in rig.spans())
    assert len(rig.spans()) == 21


def test_annotated_copy_keeps_the_span_intact(rig: Rig) -> None:
    docs_loop(rig.agent(), turns=4)
    det = rig.detections[0]
    tool = rig.by_id()[det.span_id]
    assert tool.attributes["gen_ai.tool.name"] == "search_docs"
    assert json.loads(tool.attributes["gen_ai.tool.call.result"]) == {"results": [], "total": 0}
    assert tool.parent is not None and tool.resource is not None
    assert tool.instrumentation_scope.name == "tests"
    assert tool.dropped_attributes == 0 and tool.dropped_events == 0
    with pytest.raises(TypeError):
        tool.attributes["x"] = 1  # type: ignore[index]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.agent for s in SCENARIOS])
def test_same_detections_as_the_offline_analysis(scenario: Any) -> None:
    """The processor, fed span by span as they end, finds what ``scan`` finds in the
    exported trace afterwards."""
    config = Config(manifest=parse_manifest(DEMO_MANIFEST, "demo"))
    r = make_rig(config)
    scenario.run(r.agent())
    records = []
    for s in r.spans():
        records.append(SpanRecord(
            trace_id=format(s.context.trace_id, "032x"), span_id=format(s.context.span_id, "016x"),
            parent_id=format(s.parent.span_id, "016x") if s.parent else "", name=s.name,
            start_ns=s.start_time or 0, end_ns=s.end_time or 0,
            attributes={k: v for k, v in s.attributes.items() if k not in _OUTPUT_KEYS},
            error=s.status.status_code.name == "ERROR", status_message=s.status.description or "",
        ))
    offline = analyse_trace(records, ProgressEngine(config)).detections
    live = r.detections
    assert [(d.reason, d.turn, d.level, d.span_id, d.scope) for d in live] == \
        [(d.reason, d.turn, d.level, d.span_id, d.scope) for d in offline]
    assert bool(live) == scenario.expect_detection
    for det in live:  # every detection is on its span in the exported data
        span = r.by_id()[det.span_id]
        assert (det.event, det.event_attributes()) in progress_events(span)


def test_without_a_wrapped_processor_only_the_agent_span_carries_it() -> None:
    r = make_rig(wrap=False, use_on_ending=False)
    docs_loop(r.agent(), turns=5)
    det = r.detections[0]
    spans = r.by_id()
    assert progress_events(spans[det.span_id]) == []  # the SDK froze it: no copy without a wrapped processor
    agent = next(s for s in r.spans() if s.name.startswith("invoke_agent"))
    assert progress_events(agent) == [("no_progress", det.event_attributes())]


def test_calls_outside_any_agent_annotate_the_local_root() -> None:
    r = make_rig()
    tracer = r.provider.get_tracer("tests")
    a = r.agent()
    with tracer.start_as_current_span("handle request"):
        for i in range(5):
            a.tool("search_docs", {"q": f"q{i}"}, {"results": []})
    det = r.detections[0]
    assert det.run_id == ""
    root = next(s for s in r.spans() if s.name == "handle request")
    assert progress_events(root) == [("no_progress", det.event_attributes())]
    assert progress_events(r.by_id()[det.span_id])
    assert (r.processor.open_spans, r.processor.tracked_traces, r.processor.active_runs) == (0, 0, 0)


def test_nested_tool_span_counts_once() -> None:
    """An MCP ``tools/call`` span inside the ``execute_tool`` span is the same call."""
    r = make_rig()
    tracer = r.provider.get_tracer("tests")
    with tracer.start_as_current_span("invoke_agent a", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}):
        for i in range(6):
            with tracer.start_as_current_span("execute_tool lookup", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}) as outer:
                with tracer.start_as_current_span("tools/call lookup", attributes={
                        "mcp.method.name": "tools/call", "gen_ai.tool.name": "lookup"}):
                    pass
                outer.set_attribute("gen_ai.tool.call.arguments", json.dumps({"id": i}))
                outer.set_attribute("gen_ai.tool.call.result", "[]")
    stats = r.processor.engine.stats
    assert (stats.calls, stats.steps) == (6, 6)  # not 12
    assert r.detections
    assert all(r.by_id()[d.span_id].name == "execute_tool lookup" for d in r.detections)


def test_parallel_calls_are_one_step() -> None:
    """Tool spans open at the same time (one model response's parallel calls) form one
    step; the step's detection lands on the span that ended last."""
    r = make_rig()
    tracer = r.provider.get_tracer("tests")
    with tracer.start_as_current_span("invoke_agent p", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "p"}):
        for _turn in range(6):
            with tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat"}):
                pass
            first = tracer.start_span("execute_tool a", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "a",
                "gen_ai.tool.call.arguments": "{}", "gen_ai.tool.call.result": "[]"})
            second = tracer.start_span("execute_tool b", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "b",
                "gen_ai.tool.call.arguments": "{}", "gen_ai.tool.call.result": "[]"})
            first.end()
            second.end()
    assert len(r.detections) >= 1
    det = r.detections[0]
    assert det.tool == "a+b"
    assert r.by_id()[det.span_id].name == "execute_tool b"
    assert progress_events(r.by_id()[det.span_id])


def test_kinds_known_only_at_the_end_are_read_there() -> None:
    """Some instrumentations (OpenInference's LangChain tracer) set the span kind when the
    span ends; the processor classifies again at the end."""
    r = make_rig()
    tracer = r.provider.get_tracer("tests")
    with tracer.start_as_current_span("LangGraph"):
        for i in range(5):
            with tracer.start_as_current_span("search") as span:
                span.set_attribute("openinference.span.kind", "TOOL")
                span.set_attribute("tool.name", "search")
                span.set_attribute("input.value", json.dumps({"q": f"v{i}"}))
                span.set_attribute("output.value", "no results found")
    assert [d.turn for d in r.detections] == [4]
    root = next(s for s in r.spans() if s.name == "LangGraph")
    assert progress_events(root) and progress_events(r.by_id()[r.detections[0].span_id])


def test_metrics() -> None:
    r = make_rig()
    docs_loop(r.agent(), turns=9)  # levels 1 and 2
    m = r.metrics()
    points = m["progress.detections"]
    assert sorted((a["progress.level"], v) for a, v in points) == [(1, 1), (2, 1)]
    for attrs, _ in points:
        assert set(attrs) == {"progress.reason", "progress.level", "progress.scope",
                              "gen_ai.agent.name", "gen_ai.tool.name"}
        assert attrs["gen_ai.agent.name"] == "docs-agent" and attrs["gen_ai.tool.name"] == "search_docs"
    # first detection at turn 4 of 9; 5 model calls of 1050 tokens after it
    assert m["progress.wasted.turns"] == [({"gen_ai.agent.name": "docs-agent"}, 5)]
    assert m["progress.wasted.tokens"] == [({"gen_ai.agent.name": "docs-agent"}, 5 * 1050)]
    assert m["progress.runs.active"][0][1] == 0
    for name in m:
        for attrs, _ in m[name]:
            assert not any("id" in k.split(".")[-1] for k in attrs), (name, attrs)


def test_active_runs_gauge_counts_open_runs() -> None:
    r = make_rig()
    tracer = r.provider.get_tracer("tests")
    spans = [tracer.start_span(f"invoke_agent a{i}", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"a{i}"}) for i in range(3)]
    for s in spans:
        with trace.use_span(s), tracer.start_as_current_span("execute_tool t", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"}):
            pass
    assert r.metrics()["progress.runs.active"][0][1] == 3
    for s in spans:
        s.end()
    assert r.metrics()["progress.runs.active"][0][1] == 0


def test_errors_never_reach_the_application(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    def bad_hook(det: Any) -> None:
        calls.append(det.turn)
        raise ZeroDivisionError("hook bug")

    exporter = InMemorySpanExporter()
    processor = ProgressSpanProcessor([ExplodingProcessor(), SimpleSpanProcessor(exporter)], config=Config(),
                                      engine=BrokenEngine(Config()), on_detection=bad_hook,
                                      meter_provider=None)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    from otel_progress.demo import ScriptedAgent

    with caplog.at_level(logging.WARNING, logger="otel_progress.processor"):
        for _ in range(3):
            docs_loop(ScriptedAgent(provider.get_tracer("t")), turns=5)
    assert calls == [4, 4, 4]  # the hook kept being called
    assert processor.hook_errors == 3
    assert processor.processor_errors > 0
    # wrapped processors after the failing one still got every span
    assert len(exporter.get_finished_spans()) == 3 * 11
    # logged once per kind, not per occurrence
    messages = [rec.getMessage() for rec in caplog.records]
    assert sum("on_detection hook raised ZeroDivisionError" in m for m in messages) == 1
    assert sum("wrapped on_end raised ValueError" in m for m in messages) == 1
    assert sum("raised KeyError" in m for m in messages) == 1


def test_error_metrics_are_counted() -> None:
    r = make_rig(on_detection=lambda d: 1 / 0)
    docs_loop(r.agent(), turns=5)
    m = r.metrics()
    assert m["progress.hook.errors"] == [({"error.type": "ZeroDivisionError"}, 1)]


def test_memory_does_not_grow_with_runs_seen() -> None:
    r = make_rig(Config(max_runs=20))
    tracer = r.provider.get_tracer("tests")
    for i in range(400):
        docs_loop(r.agent(), turns=2, healthy=True, name=f"a{i % 7}")
    assert (r.processor.open_spans, r.processor.tracked_traces, r.processor.active_runs) == (0, 0, 0)
    # runs that never end: capped at max_runs (least recently used dropped)
    left_open = []
    for i in range(200):
        span = tracer.start_span("invoke_agent stuck", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"s{i}"})
        left_open.append(span)
        with trace.use_span(span), tracer.start_as_current_span("execute_tool t", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t",
                "gen_ai.tool.call.result": "x"}):
            pass
    assert r.processor.tracked_traces <= 20
    assert r.processor.active_runs <= 20
    evicted = sum(v for _, v in r.metrics()["progress.runs.evicted"])
    assert evicted >= 180


def test_open_span_table_is_capped() -> None:
    r = make_rig(max_spans=100)
    tracer = r.provider.get_tracer("tests")
    with tracer.start_as_current_span("invoke_agent a", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}):
        leaked = [tracer.start_span(f"never ended {i}") for i in range(1000)]
    assert r.processor.open_spans <= 101
    assert leaked


def test_idle_runs_are_dropped_after_the_ttl() -> None:
    import time

    r = make_rig(Config(run_ttl_seconds=0.05))
    tracer = r.provider.get_tracer("tests")
    stuck = tracer.start_span("invoke_agent idle", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "idle"})
    with trace.use_span(stuck), tracer.start_as_current_span("execute_tool t", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"}):
        pass
    assert r.processor.tracked_traces == 1
    time.sleep(1.1)  # past the TTL and the eviction interval
    docs_loop(r.agent(), turns=1, healthy=True)
    assert r.processor.tracked_traces == 0
    assert r.processor.active_runs == 0
    stuck.end()


def test_force_flush_and_shutdown_reach_the_wrapped_processor() -> None:
    seen: list[str] = []

    class Recorder(SpanProcessor):
        def force_flush(self, timeout_millis: int = 30000) -> bool:
            seen.append(f"flush {timeout_millis > 0}")
            return True

        def shutdown(self) -> None:
            seen.append("shutdown")

    p = ProgressSpanProcessor(Recorder(), config=Config())
    assert p.force_flush(1000) is True
    p.shutdown()
    assert seen == ["flush True", "shutdown"]


def test_agent_outliving_its_root_span_still_frees_the_trace() -> None:
    r = make_rig()
    tracer = r.provider.get_tracer("tests")
    root = tracer.start_span("handle request")
    with trace.use_span(root):
        agent = tracer.start_span("invoke_agent late", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "late"})
    root.end()  # fire-and-forget: the request returned, the agent goes on
    with trace.use_span(agent), tracer.start_as_current_span("execute_tool t", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"}):
        pass
    assert r.processor.tracked_traces == 1
    agent.end()
    assert (r.processor.open_spans, r.processor.tracked_traces, r.processor.active_runs) == (0, 0, 0)
