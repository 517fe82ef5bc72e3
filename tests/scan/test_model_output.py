"""The model's side of a step through ``scan``: an OTLP/JSON file of an AI SDK run (its
``ai.generateText.doGenerate`` model calls with ``ai.response.text`` /
``ai.response.toolCalls``, as ``ai`` 6.0.326 ``src/generate-text/generate-text.ts`` writes
them) is read, and each model call's output reaches :meth:`ProgressEngine.observe_model`
with its run, in the order the calls ran; what the engine detects there is in the scan's
result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import otel_progress.scan as scan_module
from otel_progress import Config, ProgressEngine
from otel_progress.model import Detection, Level, ModelOutput, Reason, Scope, ToolRequest
from otel_progress.otlp.files import encode_attributes
from otel_progress.scan import scan_paths

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
_RECORDED: list[ModelOutput] = []


class RecordingEngine(ProgressEngine):
    """Records the outputs; a text seen before in the run is a ``text_repeat``."""

    def observe_model(self, output: ModelOutput, *, now: float | None = None) -> list[Detection]:
        seen = any(o.text == output.text and o.run_id == output.run_id for o in _RECORDED)
        _RECORDED.append(output)
        if not seen:
            return []
        return [Detection(Reason.TEXT_REPEAT, turn=len(_RECORDED), level=Level.NUDGE, scope=Scope.AGENT,
                          trace_id=output.trace_id, span_id=output.span_id, run_id=output.run_id,
                          agent=output.agent, tool="", figures={}, nudge="", handoff="")]


def _span(sid: str, parent: str, name: str, start_ms: int, end_ms: int, attributes: dict[str, Any]) -> dict[str, Any]:
    return {"traceId": TRACE, "spanId": sid, "parentSpanId": parent, "name": name,
            "startTimeUnixNano": str(start_ms * 1_000_000), "endTimeUnixNano": str(end_ms * 1_000_000),
            "attributes": encode_attributes(attributes), "status": {}}


def _document() -> dict[str, Any]:
    root = "a000000000000001"
    spans = [_span(root, "", "ai.generateText", 0, 100, {
        "ai.operationId": "ai.generateText", "ai.telemetry.functionId": "support-agent"})]
    prompt = json.dumps([{"role": "user", "content": [{"type": "text", "text": "Refund policy?"}]}])
    for i in range(2):
        model, tool = f"b00000000000000{i}", f"c00000000000000{i}"
        spans.append(_span(model, root, "ai.generateText.doGenerate", 10 + 40 * i, 20 + 40 * i, {
            "ai.operationId": "ai.generateText.doGenerate", "ai.response.text": "Let me search again.",
            "ai.response.toolCalls": json.dumps([{"toolCallId": f"call_{i}", "toolName": "search_docs",
                                                  "input": "{\"query\":\"refund\"}"}]),
            "ai.prompt.messages": prompt, "ai.usage.inputTokens": 100, "ai.usage.outputTokens": 10}))
        spans.append(_span(tool, root, "ai.toolCall", 21 + 40 * i, 30 + 40 * i, {
            "ai.operationId": "ai.toolCall", "ai.toolCall.name": "search_docs", "ai.toolCall.id": f"call_{i}",
            "ai.toolCall.args": "{\"query\":\"refund\"}", "ai.toolCall.result": "[]"}))
    return {"resourceSpans": [{"resource": {"attributes": encode_attributes({"service.name": "support"})},
                               "scopeSpans": [{"scope": {"name": "ai"}, "spans": spans}]}]}


def test_scan_hands_each_model_output_to_the_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps(_document()) + "\n")
    _RECORDED.clear()
    monkeypatch.setattr(scan_module, "ProgressEngine", RecordingEngine)
    result = scan_paths([str(path)], Config(), progress=False)
    assert [(o.span_id, o.run_id, o.agent, o.text, o.prompt, o.requests) for o in _RECORDED] == [
        (f"b00000000000000{i}", "a000000000000001", "support-agent", "Let me search again.", "Refund policy?",
         (ToolRequest("search_docs", {"query": "refund"}, f"call_{i}"),)) for i in range(2)]
    assert all(o.trace_id == TRACE for o in _RECORDED)
    found = [(d.reason, d.span_id) for d in result.detections if d.reason is Reason.TEXT_REPEAT]
    assert found == [(Reason.TEXT_REPEAT, "b000000000000001")]
