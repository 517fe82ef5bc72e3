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

from .helpers import agent_span, request, span, tool_span


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
