"""Background analysis: same detections and exported spans as inline, from a worker thread;
ordering, concurrency, fork, flush, shutdown, a full queue, and the configuration."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Tracer

from otel_progress import Config, ConfigError, Detection, ProgressSpanProcessor
from otel_progress.demo import DEMO_MANIFEST, SCENARIOS, ScriptedAgent
from otel_progress.engine.manifest import parse_manifest
from otel_progress.instrument import ProgressInstrumentor
from otel_progress.processor.annotation import SpanAnnotator

from .conftest import (
    BrokenEngine,
    ExplodingProcessor,
    Rig,
    docs_loop,
    in_forked_child,
    make_rig,
    progress_events,
    run_docs_loops_in_threads,
)

T0 = 1_700_000_000_000_000_000
TOOL = {"gen_ai.operation.name": "execute_tool"}
AGENT = {"gen_ai.operation.name": "invoke_agent"}


class SequentialIds(IdGenerator):
    """The same ids in every run, so that two runs' spans can be compared."""

    def __init__(self) -> None:
        self._n = 0

    def generate_span_id(self) -> int:
        self._n += 1
        return self._n

    def generate_trace_id(self) -> int:
        self._n += 1
        return (0xABCD << 64) | self._n


class Gate:
    """A hook that holds the worker at the first detection until released: everything
    after it is analysed once the application has moved on (the agent spans ended)."""

    def __init__(self, sink: list[Detection]) -> None:
        self.sink = sink
        self.open = threading.Event()
        self.threads: set[str] = set()

    def __call__(self, det: Detection) -> None:
        self.threads.add(threading.current_thread().name)
        self.sink.append(det)
        assert self.open.wait(30)


class SyncedAgent(ScriptedAgent):
    """Waits for the worker after each model and tool call: every detection is then
    analysed while its agent span is still open."""

    sync: Callable[[], Any] = staticmethod(lambda: None)

    def chat(self, *args: Any, **kwargs: Any) -> None:
        super().chat(*args, **kwargs)
        self.sync()

    def tool(self, *args: Any, **kwargs: Any) -> None:
        super().tool(*args, **kwargs)
        self.sync()


def _span(tracer: Tracer, a: ScriptedAgent, name: str, **attributes: Any) -> Any:
    return tracer.start_span(name, start_time=a.now, attributes=attributes or None)


def script(tracer: Tracer, a: SyncedAgent) -> None:
    """Every kind of run the processor knows, with simulated times (comparable runs)."""

    def end(span: Any) -> None:
        span.end(end_time=a.now)
        a.sync()

    for scenario in SCENARIOS:
        scenario.run(a)
    docs_loop(a, turns=9)
    # calls outside any agent: the trace's local root carries the event
    root = _span(tracer, a, "handle request")
    with trace.use_span(root):
        for i in range(5):
            a.tool("search_docs", {"q": f"q{i}"}, {"results": []})
    end(root)
    # parallel calls of one model response are one step
    with a.agent("parallel"):
        for _ in range(6):
            a.chat(100, 10)
            first = _span(tracer, a, "execute_tool a", **TOOL, **{
                "gen_ai.tool.name": "a", "gen_ai.tool.call.arguments": "{}", "gen_ai.tool.call.result": "[]"})
            second = _span(tracer, a, "execute_tool b", **TOOL, **{
                "gen_ai.tool.name": "b", "gen_ai.tool.call.arguments": "{}", "gen_ai.tool.call.result": "[]"})
            a.advance(1)
            end(first)
            end(second)
    # an MCP span inside the tool span counts once
    with a.agent("nested"):
        for i in range(6):
            outer = _span(tracer, a, "execute_tool lookup", **TOOL, **{"gen_ai.tool.name": "lookup"})
            with trace.use_span(outer):
                end(_span(tracer, a, "tools/call lookup", **{"mcp.method.name": "tools/call",
                                                             "gen_ai.tool.name": "lookup"}))
            outer.set_attribute("gen_ai.tool.call.arguments", json.dumps({"id": i}))
            outer.set_attribute("gen_ai.tool.call.result", "[]")
            a.advance(1)
            end(outer)
    # kinds known only at the end (OpenInference's LangChain tracer)
    graph = _span(tracer, a, "LangGraph")
    with trace.use_span(graph):
        for i in range(5):
            span = _span(tracer, a, "search")
            span.set_attribute("openinference.span.kind", "TOOL")
            span.set_attribute("tool.name", "search")
            span.set_attribute("input.value", json.dumps({"q": f"v{i}"}))
            span.set_attribute("output.value", "no results found")
            a.advance(1)
            end(span)
    end(graph)
    # an agent that outlives its root span
    root = _span(tracer, a, "handle request")
    with trace.use_span(root):
        late = _span(tracer, a, "invoke_agent late", **AGENT, **{"gen_ai.agent.name": "late"})
    end(root)
    with trace.use_span(late):
        for i in range(5):
            a.tool("search_docs", {"q": f"late {i}"}, {"results": []})
    end(late)


def exported(rig: Rig) -> list[dict[str, Any]]:
    """Everything an exporter sees of each span, in the order it got them."""
    return [{
        "name": s.name,
        "ids": (s.context.trace_id, s.context.span_id, s.parent.span_id if s.parent else None),
        "kind": s.kind,
        "times": (s.start_time, s.end_time),
        "status": (s.status.status_code, s.status.description),
        "attributes": dict(s.attributes or {}),
        "events": [(e.name, e.timestamp, dict(e.attributes or {})) for e in s.events],
        "links": list(s.links),
        "dropped": (s.dropped_attributes, s.dropped_events, s.dropped_links),
        "resource": dict(s.resource.attributes),
        "scope": s.instrumentation_scope.name if s.instrumentation_scope else None,
    } for s in rig.spans()]


def run_script(variant: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Detection], list[dict[str, Any]], int]:
    """Run the script: ``inline``; ``background`` as it comes; ``lagging`` (the worker
    is held at the first detection until the script is over); ``synced`` (the script
    waits for the worker after each call). Returns the detections, the exported spans
    and how many detections reached an agent span that had already ended."""
    late_calls = [0]
    original = SpanAnnotator._annotate_late

    def counting(self: SpanAnnotator, *args: Any) -> None:
        late_calls[0] += 1
        original(self, *args)

    monkeypatch.setattr(SpanAnnotator, "_annotate_late", counting)
    detections: list[Detection] = []
    gate = Gate(detections)
    if variant != "lagging":
        gate.open.set()
    config = Config(manifest=parse_manifest(DEMO_MANIFEST, "demo"))
    rig = make_rig(config, id_generator=SequentialIds(), on_detection=gate,
                   analysis="inline" if variant == "inline" else "background")
    tracer = rig.provider.get_tracer("tests")
    agent = SyncedAgent(tracer, start_ns=T0)
    if variant == "synced":
        agent.sync = lambda: rig.processor.force_flush()  # type: ignore[method-assign]
    script(tracer, agent)
    gate.open.set()
    spans = exported(rig)
    assert rig.processor.processor_errors == 0
    assert (rig.processor.open_spans, rig.processor.tracked_traces, rig.processor.active_runs) == (0, 0, 0)
    expected_thread = "MainThread" if variant == "inline" else "OtelProgressAnalysis"
    assert gate.threads == {expected_thread}
    rig.provider.shutdown()
    return detections, spans, late_calls[0]


def test_background_detects_and_exports_exactly_what_inline_does(monkeypatch: pytest.MonkeyPatch) -> None:
    inline_dets, inline_spans, _ = run_script("inline", monkeypatch)
    assert len(inline_dets) >= 10
    assert sum(bool(s["events"]) for s in inline_spans) >= 15
    for variant in ("background", "lagging", "synced"):
        dets, spans, late = run_script(variant, monkeypatch)
        assert dets == inline_dets, variant  # every field, nudge and handoff texts included
        assert len(spans) == len(inline_spans), variant
        for got, want in zip(spans, inline_spans, strict=True):  # same order, same content
            assert got == want, (variant, want["name"])
        if variant == "lagging":
            assert late > 0  # agent spans had ended: annotated on the copy handed over
        if variant == "synced":
            assert late == 0  # agent spans still open: annotated through the span API


def test_a_detection_for_an_ended_agent_span_without_a_wrapped_processor() -> None:
    """Documented: with the processor added after the exporter, the SDK exports the agent
    span when it ends; a detection analysed after that reaches the hook, not the span."""
    detections: list[Detection] = []
    gate = Gate(detections)
    r = make_rig(wrap=False, on_detection=gate, analysis="background")
    docs_loop(r.agent(), turns=9)  # detections at turns 4 and 8; the first one holds the worker
    agent = next(s for s in r.exporter.get_finished_spans() if s.name.startswith("invoke_agent"))
    gate.open.set()
    r.processor.force_flush()
    assert [d.turn for d in detections] == [4, 8]
    assert [e[1]["progress.turn"] for e in progress_events(agent)] == []
    r.provider.shutdown()


def test_spans_reach_the_wrapped_processor_once_in_the_order_they_ended() -> None:
    order: list[str] = []

    class Recorder(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            order.append(span.name)

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True  # (SDK 1.40's SpanProcessor returns None)

    gate_det: list[Detection] = []
    gate = Gate(gate_det)
    processor = ProgressSpanProcessor(Recorder(), config=Config(), on_detection=gate, analysis="background")
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    ended: list[str] = []
    with tracer.start_as_current_span("GET /", attributes={"http.method": "GET"}):
        for i in range(3):
            with tracer.start_as_current_span(f"plain {i}"):
                pass
            ended.append(f"plain {i}")
        a = ScriptedAgent(tracer)
        with a.agent("x"):
            for i in range(6):
                a.tool("search_docs", {"q": i}, {"results": []})
                ended.append("execute_tool search_docs")
                with tracer.start_as_current_span(f"after {i}"):  # queued behind the tool span
                    pass
                ended.append(f"after {i}")
        ended.append("invoke_agent x")
    ended.append("GET /")
    assert len(order) < len(ended)  # the worker is held at the detection
    gate.open.set()
    assert processor.force_flush(5000)
    assert order == ended
    provider.shutdown()


# -- concurrency and fork -------------------------------------------------------------------------


def test_sixteen_threads_lose_and_duplicate_nothing_in_background() -> None:
    baseline = make_rig()
    docs_loop(baseline.agent(), turns=14)
    expected = sorted((d.reason.value, d.turn, int(d.level)) for d in baseline.detections)
    assert len(expected) >= 2
    r = make_rig(Config(max_runs=10_000), analysis="background", max_queue_size=256)
    runs_per_thread = 12
    run_docs_loops_in_threads(r, 16, runs_per_thread)
    spans = r.spans()  # flushes
    assert len(spans) == 16 * runs_per_thread * 29  # agent + 14 chats + 14 tools each
    assert len({s.context.span_id for s in spans}) == len(spans)  # exactly once
    by_agent: dict[str, list[tuple[str, int, int]]] = {}
    for det in r.detections:
        assert det.agent is not None
        by_agent.setdefault(det.agent, []).append((det.reason.value, det.turn, int(det.level)))
    assert len(by_agent) == 16 * runs_per_thread
    for agent, dets in by_agent.items():
        assert sorted(dets) == expected, agent
    by_id = {format(s.context.span_id, "016x"): s for s in spans}
    counts = Counter(d.span_id for d in r.detections)
    assert all(c == 1 for c in counts.values())
    for det in r.detections:
        assert progress_events(by_id[det.span_id]) == [(det.event, det.event_attributes())]
    for agent_span in (s for s in spans if s.name.startswith("invoke_agent")):
        name = agent_span.attributes["gen_ai.agent.name"]
        turns = sorted(e[1]["progress.turn"] for e in progress_events(agent_span))
        assert turns == sorted(t for _, t, _ in by_agent[name]), name
    assert r.processor.processor_errors == 0
    assert (r.processor.open_spans, r.processor.tracked_traces, r.processor.active_runs) == (0, 0, 0)
    r.provider.shutdown()


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs fork")
def test_forked_child_starts_afresh_with_its_own_worker() -> None:
    detections: list[Detection] = []
    gate = Gate(detections)
    r = make_rig(on_detection=gate, analysis="background")
    tracer = r.provider.get_tracer("tests")
    open_agent = tracer.start_span("invoke_agent parent-run", attributes={
        **AGENT, "gen_ai.agent.name": "parent-run"})
    with trace.use_span(open_agent), tracer.start_as_current_span("execute_tool t", attributes={
            **TOOL, "gen_ai.tool.name": "t"}):
        pass
    docs_loop(r.agent(), turns=9)  # the worker is held at turn 4; the rest is queued
    deadline = time.monotonic() + 10
    while not detections and time.monotonic() < deadline:
        time.sleep(0.01)
    assert detections and r.processor.queued > 0
    def child() -> tuple[Any, ...]:
        gate.open.set()  # (the child's copy; no worker in the child until its first span)
        exported_before = len(r.exporter.get_finished_spans())
        fresh = (r.processor.queued, r.processor.open_spans, r.processor.tracked_traces,
                 r.processor.active_runs)
        before = len(detections)
        docs_loop(r.agent(), turns=5)
        flushed = r.processor.force_flush(10_000)
        found = [(d.reason.value, d.turn) for d in detections[before:]]
        return fresh, found, flushed, len(r.exporter.get_finished_spans()) - exported_before

    fresh, found, flushed, new_spans = in_forked_child(child)
    assert fresh == (0, 0, 0, 0)
    assert found == [("barren", 4)]
    assert flushed is True
    assert new_spans == 11  # its own run only: the parent's queued spans are the parent's
    # the parent goes on where it was
    gate.open.set()
    assert r.processor.force_flush(10_000)
    assert [d.turn for d in detections] == [4, 8]
    assert r.processor.tracked_traces == 1
    open_agent.end()
    r.processor.force_flush()
    assert r.processor.tracked_traces == 0
    r.provider.shutdown()


# -- flush, shutdown, a full queue ----------------------------------------------------------------


class Recorder(SpanProcessor):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.calls.append(f"end {span.name}")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.calls.append("flush")
        return True

    def shutdown(self) -> None:
        self.calls.append("shutdown")


@pytest.fixture
def gated() -> Iterator[tuple[ProgressSpanProcessor, Recorder, Gate, Tracer]]:
    detections: list[Detection] = []
    gate = Gate(detections)
    inner = Recorder()
    processor = ProgressSpanProcessor(inner, config=Config(), on_detection=gate, analysis="background",
                                      max_queue_size=64)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    yield processor, inner, gate, provider.get_tracer("t")
    gate.open.set()
    processor.shutdown()


def test_force_flush_waits_for_the_worker_within_the_timeout(gated: Any) -> None:
    processor, inner, gate, tracer = gated
    docs_loop(ScriptedAgent(tracer), turns=6)  # held at turn 4
    start = time.monotonic()
    assert processor.force_flush(200) is False
    assert time.monotonic() - start < 2
    assert inner.calls[-1] == "flush"  # the wrapped processor is flushed all the same
    assert processor.queued > 0
    gate.open.set()
    assert processor.force_flush(5000) is True
    ends = [c for c in inner.calls if c.startswith("end")]
    assert len(ends) == 13 and ends[-1] == "end invoke_agent docs-agent"
    assert processor.queued == 0


def test_shutdown_drains_the_queue_then_shuts_the_wrapped_processor_down(gated: Any) -> None:
    processor, inner, gate, tracer = gated
    docs_loop(ScriptedAgent(tracer), turns=6)
    threading.Timer(0.2, gate.open.set).start()
    processor.shutdown()
    assert [c for c in inner.calls if c != "flush"][-1] == "shutdown"
    assert len([c for c in inner.calls if c.startswith("end")]) == 13
    assert processor.analysis == "inline"  # later spans: analysed on the thread that ends them
    with tracer.start_as_current_span("late"):
        pass
    assert inner.calls[-1] == "end late"


def test_shutdown_with_a_stuck_hook_passes_the_rest_on_unanalysed(
        gated: Any, caplog: pytest.LogCaptureFixture) -> None:
    processor, inner, _, tracer = gated
    docs_loop(ScriptedAgent(tracer), turns=6)  # the hook never returns (until the test ends)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="otel_progress.processor"):
        processor.shutdown(timeout_millis=300)
    assert time.monotonic() - start < 3
    assert inner.calls[-1] == "shutdown"
    ends = [c for c in inner.calls if c.startswith("end")]
    assert len(ends) == 12  # all but the tool span of the stuck hook, which is still in its hands
    assert "passed on without analysis" in caplog.text


def test_a_full_queue_makes_the_thread_wait_then_overflow_never_drop() -> None:
    detections: list[Detection] = []
    gate = Gate(detections)
    r = make_rig(on_detection=gate, analysis="background", max_queue_size=8)
    start = time.monotonic()
    for _ in range(3):
        docs_loop(r.agent(), turns=6)  # held at the first turn 4; 3 x 13 spans to queue
    elapsed = time.monotonic() - start
    assert 0.9 < elapsed < 5  # one wait of a second, then past the bound without waiting
    assert r.processor.queued > 8
    gate.open.set()
    spans = r.spans()
    assert len(spans) == 3 * 13 and len({s.context.span_id for s in spans}) == 39
    assert [d.turn for d in detections] == [4, 4, 4]
    full = dict((a["progress.queue.action"], v) for a, v in r.metrics()["progress.analysis.full"])
    assert full.get("overflow", 0) >= 1
    r.provider.shutdown()


def test_a_full_queue_with_a_slow_worker_only_waits() -> None:
    def slow(det: Detection) -> None:
        time.sleep(0.05)

    r = make_rig(on_detection=slow, analysis="background", max_queue_size=8)
    for _ in range(4):
        docs_loop(r.agent(), turns=6)
    assert len(r.spans()) == 4 * 13
    full = dict((a["progress.queue.action"], v) for a, v in r.metrics()["progress.analysis.full"])
    assert full.get("waited", 0) >= 1 and "overflow" not in full
    assert r.metrics()["progress.analysis.queued"][0][1] == 0
    r.provider.shutdown()


def test_a_hook_may_make_spans_and_flush_from_the_worker() -> None:
    results: list[bool] = []
    holder: list[Rig] = []

    def hook(det: Detection) -> None:
        rig = holder[0]
        with rig.provider.get_tracer("hook").start_as_current_span("nudge sent"):
            pass
        results.append(rig.processor.force_flush(1000))  # cannot wait for itself: says so

    r = make_rig(on_detection=hook, analysis="background", max_queue_size=2)
    holder.append(r)
    docs_loop(r.agent(), turns=9)
    names = [s.name for s in r.spans()]
    assert names.count("nudge sent") == 2
    assert results == [False, False]
    assert r.processor.processor_errors == 0
    r.provider.shutdown()


def test_errors_never_reach_the_application_in_background() -> None:
    calls: list[int] = []

    def bad_hook(det: Any) -> None:
        calls.append(det.turn)
        raise ZeroDivisionError("hook bug")

    exporter = InMemorySpanExporter()
    processor = ProgressSpanProcessor([ExplodingProcessor(), SimpleSpanProcessor(exporter)], config=Config(),
                                      engine=BrokenEngine(Config()), on_detection=bad_hook,
                                      analysis="background")
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    for _ in range(3):
        docs_loop(ScriptedAgent(provider.get_tracer("t")), turns=5)
    processor.force_flush(5000)
    assert processor.queued == 0
    assert calls == [4, 4, 4]
    assert processor.hook_errors == 3
    assert processor.processor_errors > 0
    assert len(exporter.get_finished_spans()) == 3 * 11
    provider.shutdown()


def test_a_dropped_processor_lets_its_worker_go() -> None:
    import gc

    r = make_rig(analysis="background")
    docs_loop(r.agent(), turns=5)
    r.processor.force_flush()
    worker = r.processor._q.thread
    assert worker is not None and worker.is_alive()
    del r
    deadline = time.monotonic() + 10
    while worker.is_alive() and time.monotonic() < deadline:
        gc.collect()  # (the processor is in reference cycles)
        worker.join(0.2)
    assert not worker.is_alive()


# -- configuration ----------------------------------------------------------------------------------


def test_analysis_mode_from_the_argument_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_PROGRESS_ANALYSIS", raising=False)
    # auto (the default): background, unless a hook wants the detection before end() returns
    # or the tool span can only be annotated in place.
    exporting = SimpleSpanProcessor(InMemorySpanExporter())
    assert ProgressSpanProcessor(exporting, config=Config()).analysis == "background"
    assert ProgressSpanProcessor(exporting, config=Config(), analysis=" AUTO ").analysis == "background"
    assert ProgressSpanProcessor(exporting, config=Config(), on_detection=print).analysis == "inline"
    assert ProgressSpanProcessor(exporting, config=Config(), use_on_ending=True).analysis == "inline"
    assert ProgressSpanProcessor(config=Config()).analysis == "inline"  # nothing wrapped
    assert ProgressSpanProcessor(config=Config(), analysis="background").analysis == "background"
    assert ProgressSpanProcessor(config=Config(), analysis="inline").analysis == "inline"
    monkeypatch.setenv("OTEL_PROGRESS_ANALYSIS", "auto")
    assert ProgressSpanProcessor(exporting, config=Config(), on_detection=print).analysis == "inline"
    monkeypatch.setenv("OTEL_PROGRESS_ANALYSIS", " Background ")
    assert ProgressSpanProcessor(config=Config()).analysis == "background"
    assert ProgressSpanProcessor(config=Config(), analysis="inline").analysis == "inline"  # the argument wins
    monkeypatch.setenv("OTEL_PROGRESS_ANALYSIS", "async")
    with pytest.raises(ConfigError, match="OTEL_PROGRESS_ANALYSIS"):
        ProgressSpanProcessor(config=Config())
    with pytest.raises(ConfigError, match="analysis"):
        ProgressSpanProcessor(config=Config(), analysis="threads")
    with pytest.raises(ValueError, match="use_on_ending"):
        ProgressSpanProcessor(config=Config(), analysis="background", use_on_ending=True)
    p = ProgressSpanProcessor(config=Config(), analysis="background")
    assert p.annotates_in_on_ending is False


@pytest.fixture
def instrumentor() -> Iterator[ProgressInstrumentor]:
    inst = ProgressInstrumentor()
    yield inst
    inst.uninstrument()


def test_instrument_option_and_environment(instrumentor: ProgressInstrumentor,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_PROGRESS_ANALYSIS", raising=False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor.instrument(tracer_provider=provider, analysis="background", max_queue_size=100)
    processor = instrumentor.processor
    assert processor is not None and processor.analysis == "background"
    assert processor._q.max_size == 100
    docs_loop(ScriptedAgent(provider.get_tracer("t")), turns=5)
    processor.force_flush()
    flagged = [s for s in exporter.get_finished_spans() if progress_events(s)]
    assert {s.name for s in flagged} == {"execute_tool search_docs", "invoke_agent docs-agent"}
    instrumentor.uninstrument()
    processor.shutdown()

    monkeypatch.setenv("OTEL_PROGRESS_ANALYSIS", "inline")  # the environment overrides the option
    instrumentor.instrument(tracer_provider=provider, analysis="background")
    assert instrumentor.processor is not None and instrumentor.processor.analysis == "inline"


def test_instrument_rejects_a_bad_mode(instrumentor: ProgressInstrumentor, caplog: pytest.LogCaptureFixture,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_PROGRESS_ANALYSIS", raising=False)
    provider = TracerProvider(shutdown_on_exit=False)
    with caplog.at_level(logging.ERROR, logger="otel_progress.instrument"):
        instrumentor.instrument(tracer_provider=provider, analysis="sometimes")
    assert instrumentor.processor is None
    assert "not enabled" in caplog.text and "analysis" in caplog.text
