"""The model's side of a step in process: an agent instrumented with the GenAI conventions
(real SDK ``TracerProvider``, the progress processor wrapping its exporter) writes its
inference spans with ``gen_ai.output.messages``; the processor reads each output when its
span ends and hands it to :meth:`ProgressEngine.observe_model` with the run it belongs to,
and what the engine detects there is reported like any detection (the hook, the span); the
model-side signals (``text_repeat``, ``unexecuted_repeat``) fire in process as in ``scan``."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from otel_progress import Config, ProgressEngine
from otel_progress.conventions.spans import SpanRecord
from otel_progress.model import Detection, Level, ModelOutput, Reason, Scope, ToolCall, ToolRequest
from otel_progress.scan.analyse import analyse_trace

from .conftest import make_rig, progress_events


class RecordingEngine(ProgressEngine):
    """An engine that records the model outputs it is given and detects a ``text_repeat``
    on an output whose text it has seen before in the run (a stand-in for the signal)."""

    def __init__(self) -> None:
        super().__init__(Config())
        self.outputs: list[ModelOutput] = []
        self.call_ids: list[str | None] = []

    def observe(self, call: ToolCall, *, flush: bool = False, now: float | None = None) -> list[Detection]:
        self.call_ids.append(call.call_id)
        return super().observe(call, flush=flush, now=now)

    def observe_model(self, output: ModelOutput, *, now: float | None = None) -> list[Detection]:
        seen = any(o.text == output.text and o.run_id == output.run_id for o in self.outputs)
        self.outputs.append(output)
        if not seen or output.text is None:
            return []
        return [Detection(Reason.TEXT_REPEAT, turn=len(self.outputs), level=Level.NUDGE, scope=Scope.AGENT,
                          trace_id=output.trace_id, span_id=output.span_id, run_id=output.run_id,
                          agent=output.agent, tool="", figures={"repeats": 2}, nudge="", handoff="")]


def _output(text: str, call: str | None) -> str:
    # opentelemetry-util-genai types.py OutputMessage / TextPart / ToolCallRequestPart
    parts: list[dict[str, Any]] = [{"content": text, "type": "text"}]
    if call:
        parts.append({"arguments": {"path": "build.log"}, "name": "read_file", "id": call, "type": "tool_call"})
    return json.dumps([{"role": "assistant", "parts": parts, "finish_reason": "tool_call" if call else "stop"}])


def _play(provider: Any, with_content: bool = True) -> None:
    tracer = provider.get_tracer("tests")
    inputs = json.dumps([{"role": "user", "parts": [{"content": "Fix the build.", "type": "text"}]}])
    with tracer.start_as_current_span("invoke_agent builder", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "builder"}):
        for i in range(2):
            attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                                          "gen_ai.usage.input_tokens": 900, "gen_ai.usage.output_tokens": 20}
            if with_content:
                attributes |= {"gen_ai.output.messages": _output("I will try again.", f"call_{i}"),
                               "gen_ai.input.messages": inputs}
            with tracer.start_as_current_span("chat m", attributes=attributes):
                pass
            with tracer.start_as_current_span("execute_tool read_file", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
                    "gen_ai.tool.call.id": f"call_{i}", "gen_ai.tool.call.arguments": "{\"path\": \"build.log\"}",
                    "gen_ai.tool.call.result": f"error {i}"}):
                pass


def test_the_processor_hands_each_output_to_the_engine_and_reports_what_it_detects() -> None:
    engine = RecordingEngine()
    rig = make_rig(engine=engine)
    try:
        _play(rig.provider)
        spans = rig.spans()
    finally:
        rig.provider.shutdown()
    agent = next(s for s in spans if s.name == "invoke_agent builder")
    chats = [s for s in spans if s.name == "chat m"]
    run = format(agent.context.span_id, "016x")
    assert [(o.span_id, o.run_id, o.agent, o.text, o.prompt, o.requests) for o in engine.outputs] == [
        (format(c.context.span_id, "016x"), run, "builder", "I will try again.", "Fix the build.",
         (ToolRequest("read_file", {"path": "build.log"}, f"call_{i}"),)) for i, c in enumerate(chats)]
    assert all(o.trace_id == format(agent.context.trace_id, "032x") for o in engine.outputs)
    assert [o.end_ns for o in engine.outputs] == [c.end_time for c in chats]
    assert engine.call_ids == ["call_0", "call_1"]  # the tool spans' gen_ai.tool.call.id: matches the requests
    # the engine's detection on the second output: the hook and the model span it belongs on
    assert [(d.reason, d.span_id) for d in rig.detections] == [
        (Reason.TEXT_REPEAT, format(chats[1].context.span_id, "016x"))]
    assert [name for name, _ in progress_events(chats[1])] == ["no_progress"]


def test_a_model_span_without_content_reaches_no_engine() -> None:
    engine = RecordingEngine()
    rig = make_rig(engine=engine)
    try:
        _play(rig.provider, with_content=False)
        rig.spans()
    finally:
        rig.provider.shutdown()
    assert engine.outputs == []
    assert rig.detections == []


def _looping_model(provider: Any, mode: str) -> None:
    """A model that says the same thing (``text``) or requests the same deployment that the
    harness never runs (``request``), four times, with nothing between (GenAI shapes as
    above)."""
    tracer = provider.get_tracer("tests")
    inputs = json.dumps([{"role": "user", "parts": [{"content": "Deploy the service.", "type": "text"}]}])
    with tracer.start_as_current_span("invoke_agent deployer", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "deployer"}):
        for i in range(4):
            if mode == "text":
                parts: list[dict[str, Any]] = [{"content": "The deployment is blocked by the failing migration"
                                                " check on the staging database.", "type": "text"}]
            else:
                parts = [{"arguments": {"env": "prod"}, "name": "deploy", "id": f"call_{i}", "type": "tool_call"}]
            with tracer.start_as_current_span("chat m", attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 5,
                    "gen_ai.input.messages": inputs,
                    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts}])}):
                pass


def _records(spans: list[Any]) -> list[SpanRecord]:
    return [SpanRecord(
        trace_id=format(s.context.trace_id, "032x"), span_id=format(s.context.span_id, "016x"),
        parent_id=format(s.parent.span_id, "016x") if s.parent else "", name=s.name,
        start_ns=s.start_time or 0, end_ns=s.end_time or 0,
        attributes={k: v for k, v in s.attributes.items() if not k.startswith("progress.")}) for s in spans]


@pytest.mark.parametrize(("mode", "reason", "at"), [("text", Reason.TEXT_REPEAT, 2),
                                                    ("request", Reason.UNEXECUTED_REPEAT, 3)])
def test_the_model_side_signals_fire_in_process_as_in_scan(mode: str, reason: Reason, at: int,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    rig = make_rig(Config())
    try:
        with caplog.at_level(logging.WARNING, logger="otel_progress"):
            _looping_model(rig.provider, mode)
            spans = rig.spans()
    finally:
        rig.provider.shutdown()
    chats = [format(s.context.span_id, "016x") for s in spans if s.name == "chat m"]
    assert [(d.reason, d.span_id) for d in rig.detections] == [(reason, chats[at])]
    offline = analyse_trace(_records(spans), ProgressEngine(Config())).detections
    assert [(d.reason, d.span_id, d.turn) for d in offline] == [(d.reason, d.span_id, d.turn) for d in rig.detections]
    # the run could be checked (on the model's side): no "nothing could be checked" warning
    assert not [r for r in caplog.records if "no tool span" in r.getMessage()]
