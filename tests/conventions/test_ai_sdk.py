"""The Vercel AI SDK's ``ai.*`` spans (``experimental_telemetry`` in AI SDK 4-6,
``LegacyOpenTelemetry`` in AI SDK 7), as ``ai`` 5.0.200 / 6.0.326 and ``@ai-sdk/otel``
1.0.173 write them (``execute-tool-call.ts``, ``legacy-open-telemetry.ts``; the attribute
values below are from a run of tests/frameworks_js)."""

from __future__ import annotations

import json

from otel_progress import NOT_CAPTURED, ProgressEngine
from otel_progress.conventions import MARKER_BYTES, MARKER_KEYS
from otel_progress.conventions.spans import SpanKind, agent_name, classify, read_tokens, read_tool_call
from otel_progress.scan.analyse import analyse_trace

from .helpers import record

_OP = "ai.operationId"


def _root(function_id: str | None = "support-agent", op: str = "ai.generateText") -> object:
    attrs = {"operation.name": f"{op} {function_id}", _OP: op, "ai.model.provider": "scripted",
             "ai.usage.inputTokens": 960, "ai.usage.outputTokens": 160}
    if function_id:
        attrs |= {"resource.name": function_id, "ai.telemetry.functionId": function_id}
    return record(op, attrs)


def _step(parent: str, op: str = "ai.generateText.doGenerate", **usage: int) -> object:
    return record(op, {_OP: op, "gen_ai.system": "scripted", "ai.usage.inputTokens": 120,
                       "ai.usage.outputTokens": 20, "ai.usage.totalTokens": 140, **usage}, parent=parent)


def _tool(parent: str, args: dict, result: object, call: int = 1, error: bool = False) -> object:
    attrs = {"operation.name": "ai.toolCall support-agent", _OP: "ai.toolCall",
             "ai.telemetry.functionId": "support-agent", "ai.toolCall.name": "search_docs",
             "ai.toolCall.id": f"call_{call}_x", "ai.toolCall.args": json.dumps(args)}
    if result is not None:
        attrs["ai.toolCall.result"] = json.dumps(result)
    return record("ai.toolCall", attrs, parent=parent, error=error)


def test_the_operations_are_classified() -> None:
    root = _root()
    assert classify(root) is SpanKind.AGENT
    assert classify(_root(op="ai.streamText")) is SpanKind.AGENT
    assert classify(_step(root.span_id)) is SpanKind.MODEL
    assert classify(_step(root.span_id, "ai.streamText.doStream")) is SpanKind.MODEL
    assert classify(_tool(root.span_id, {"query": "x"}, {"results": []})) is SpanKind.TOOL
    assert classify(record("ai.generateObject", {_OP: "ai.generateObject"})) is SpanKind.OTHER
    assert "ai.operationId" in MARKER_KEYS and b"ai.operationId" in MARKER_BYTES


def test_a_tool_call_is_read_and_a_json_encoded_text_result_decoded() -> None:
    call = read_tool_call(_tool("p" * 16, {"query": "refunds"}, "0 results"))
    assert (call.name, json.loads(call.arguments), call.result) == ("search_docs", {"query": "refunds"}, "0 results")
    # an object result is JSON.stringify of the object; the call id never enters the call
    a = read_tool_call(_tool("p" * 16, {"query": "refunds"}, {"results": [], "total": 0}, call=1))
    b = read_tool_call(_tool("p" * 16, {"query": "refunds"}, {"results": [], "total": 0}, call=2))
    assert a.arguments == b.arguments and a.result == b.result


def test_recording_off_leaves_the_call_uncaptured_and_a_failure_is_an_error() -> None:
    span = record("ai.toolCall", {_OP: "ai.toolCall", "ai.toolCall.name": "search_docs", "ai.toolCall.id": "c"},
                  parent="p" * 16)
    call = read_tool_call(span)
    assert call.name == "search_docs"
    assert call.arguments is NOT_CAPTURED and call.result is NOT_CAPTURED
    failed = read_tool_call(_tool("p" * 16, {"query": "x"}, None, error=True))
    assert failed.error


def test_tokens_come_from_the_model_calls_not_the_run() -> None:
    root = _root()
    assert read_tokens(_step(root.span_id)) == 140
    assert read_tokens(_step(root.span_id, **{"ai.usage.inputTokens": 0, "ai.usage.outputTokens": 0})) == 0
    v4 = record("ai.generateText.doGenerate", {_OP: "ai.generateText.doGenerate", "ai.usage.promptTokens": 50,
                                               "ai.usage.completionTokens": 7})
    assert read_tokens(v4) == 57
    assert read_tokens(root) == 0  # the run's sum is never read: its steps are


def test_the_agent_is_the_function_id_else_the_operation() -> None:
    assert agent_name(_root()) == "support-agent"
    assert agent_name(_root(function_id=None)) == "ai.generateText"


def test_a_generate_text_run_that_loops_is_caught_and_a_healthy_one_is_not() -> None:
    def run(results: list[object]) -> list[tuple[str, int]]:
        root = _root()
        spans = [root]
        for i, result in enumerate(results):
            spans.append(_step(root.span_id))
            spans.append(_tool(root.span_id, {"query": f"refund policy {i}"}, result, call=i))
        spans.append(_step(root.span_id))
        report = analyse_trace(spans, ProgressEngine())
        return [(d.reason.value, d.turn) for d in report.detections if d.scope.value == "agent"]

    assert ("barren", 4) in run([{"results": [], "total": 0}] * 6)
    assert run([{"results": [f"passage {i}"], "total": 1} for i in range(6)]) == []


def test_the_ai_sdk_5_beta_names_are_read() -> None:
    span = record("ai.toolCall", {_OP: "ai.toolCall", "ai.toolCall.name": "search_docs",
                                  "ai.toolCall.input": '{"query":"refunds"}', "ai.toolCall.output": '"0 results"'})
    call = read_tool_call(span)
    assert (json.loads(call.arguments), call.result) == ({"query": "refunds"}, "0 results")
