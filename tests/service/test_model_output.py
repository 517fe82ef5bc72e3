"""The model's side of a step in ``serve``'s trace path (BatchDetector): an OpenInference
``LLM`` span's ``llm.output_messages`` (``openinference/semconv/trace/__init__.py``,
``MessageAttributes``, ``ToolCallAttributes``) reaches :meth:`ProgressEngine.observe_model`
with its run, whether the trace arrives in one request or several."""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.trace.v1 import trace_pb2

from otel_progress import Config, ProgressEngine
from otel_progress.model import Detection, ModelOutput, ToolRequest
from otel_progress.service.detector import BatchDetector

from .helpers import Request, agent_span, detections_on, request, span, tool_span


class RecordingEngine(ProgressEngine):
    def __init__(self) -> None:
        super().__init__(Config())
        self.outputs: list[ModelOutput] = []

    def observe_model(self, output: ModelOutput, *, now: float | None = None) -> list[Detection]:
        self.outputs.append(output)
        return []


def _llm(span_id: int, turn: int) -> trace_pb2.Span:
    attrs: dict[str, Any] = {
        "openinference.span.kind": "LLM", "llm.token_count.prompt": 900, "llm.token_count.completion": 20,
        "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": "Fix the build.",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": f"Attempt {turn}.",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": f"call_{turn}",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "read_file",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{\"path\": \"a.py\"}"}
    return span(7, span_id, 1, "ChatOpenAI", turn * 2.0 - 1.0, turn * 2.0 - 0.1, attrs)


def test_serve_hands_each_model_output_to_the_engine() -> None:
    spans = []
    for t in (1, 2, 3):
        spans.append(_llm(100 + t, t))
        spans.append(tool_span(7, 200 + t, 1, t, tool="read_file", args={"path": "a.py"}, result={"text": "x"}))
    spans.append(agent_span(7, 1, None, 3, name="coder"))
    for batches in (1, 3):
        engine = RecordingEngine()
        detector = BatchDetector(engine)
        size = -(-len(spans) // batches)
        for i in range(0, len(spans), size):
            detector.process(request(spans[i:i + size]).SerializeToString())
        assert [(o.span_id, o.run_id, o.text, o.prompt, o.requests) for o in engine.outputs] == [
            (f"{100 + t:016x}", f"{1:016x}", f"Attempt {t}.", "Fix the build.",
             (ToolRequest("read_file", {"path": "a.py"}, f"call_{t}"),)) for t in (1, 2, 3)], batches


def _unknown_tool_call(span_id: int, call: int) -> trace_pb2.Span:
    """A model call that requests ``get_order_status``, a tool the agent does not have (so
    no tool span ever answers it), as AI SDK 7's ``unknown_tool`` run does."""
    attrs: dict[str, Any] = {
        "openinference.span.kind": "LLM", "llm.token_count.prompt": 100, "llm.token_count.completion": 20,
        "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": "Where is A-17?",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": f"call_{call}",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "get_order_status",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{\"order_id\": \"A-17\"}"}
    return span(8, span_id, 1, "ChatOpenAI", call * 2.0 - 1.0, call * 2.0 - 0.1, attrs)


def test_serve_reports_each_level_of_a_loop_with_no_tool_step_as_scan_does() -> None:
    """Seven model calls request a tool that never runs: ``unexecuted_repeat`` at the 4th
    (level 1) and again at the 7th (level 2). With no tool step between them the run's turn
    stays 0, so both levels are at turn 0: serve reported the turn once (the level 2 was
    dropped) and wrote only the level 1 on the agent span (AI SDK 7's ``unknown_tool``
    rows, FINDINGS.md). Whatever the batches, serve places what scan finds, and the agent
    span carries both levels."""
    from otel_progress.scan.analyse import analyse_trace
    from otel_progress.service.annotate import annotated_request
    from otel_progress.service.otlp import span_record

    spans = [_unknown_tool_call(100 + c, c) for c in range(1, 8)]
    spans.append(agent_span(8, 1, None, 7, name="support"))
    report = analyse_trace([span_record(s, {"service.name": "agent-svc"}) for s in spans], ProgressEngine(Config()))
    scanned = [(d.span_id, d.reason.value, d.turn, int(d.level)) for d in report.detections]
    assert scanned == [(f"{104:016x}", "unexecuted_repeat", 0, 1), (f"{107:016x}", "unexecuted_repeat", 0, 2)]
    for batches in (1, 2, 8):
        detector = BatchDetector(ProgressEngine(Config()))
        size = -(-len(spans) // batches)
        served: list[tuple[str, str, int, int]] = []
        on_agent: list[int] = []
        for i in range(0, len(spans), size):
            raw = request(spans[i:i + size]).SerializeToString()
            out, _written = annotated_request(raw, detector.process(raw).placements)
            for span_id, _event, attrs in detections_on(Request.FromString(out)):
                row = (span_id, attrs["progress.reason"], attrs["progress.turn"], attrs["progress.level"])
                if span_id == f"{1:016x}":
                    on_agent.append(row[3])
                else:
                    served.append(row)
        assert served == scanned, batches
        assert sorted(on_agent) == [1, 2], batches
