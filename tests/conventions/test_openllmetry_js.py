"""OpenLLMetry for JavaScript, LangChain.js (``@traceloop/instrumentation-langchain`` 0.27.0,
``TraceloopCallbackHandler.handleToolStart`` / ``handleToolEnd``): ``task`` spans on
``execute_tool``, the tool's class as its name, ``{args: [input]}`` and the serialised
``ToolMessage`` (values from a run of tests/frameworks_js)."""

from __future__ import annotations

import json

from otel_progress.conventions.spans import SpanKind, classify, read_tool_call

from .helpers import record


def _message(content: str, name: str = "lookup_order", call: str = "call_1_ab") -> str:
    return json.dumps({"lc": 1, "type": "constructor", "id": ["langchain_core", "messages", "ToolMessage"],
                       "kwargs": {"status": "success", "content": content, "tool_call_id": call, "name": name,
                                  "metadata": {}, "additional_kwargs": {}, "response_metadata": {}}},
                      separators=(",", ":"))


def _span(args: dict | None, output: str | None) -> object:
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.provider.name": "langchain",
             "traceloop.span.kind": "task", "traceloop.entity.name": "DynamicStructuredTool"}
    if args is not None:
        attrs["traceloop.entity.input"] = json.dumps({"args": [json.dumps(args)]})
    if output is not None:
        attrs["traceloop.entity.output"] = output
    return record("execute_tool DynamicStructuredTool", attrs)


def test_the_call_is_read_with_the_tool_messages_name() -> None:
    span = _span({"order_id": "A-17"}, _message('{"order_id":"A-17","items":2}'))
    assert classify(span) is SpanKind.TOOL
    a = read_tool_call(span)
    b = read_tool_call(_span({"order_id": "A-17"}, _message('{"order_id":"A-17","items":2}', call="call_2_cd")))
    assert a.name == "lookup_order"
    assert a.arguments == b.arguments and json.loads(a.arguments) == {"order_id": "A-17"}
    assert a.result == b.result and "A-17" in str(a.result) and "call_" not in str(a.result)


def test_without_content_the_tool_is_its_class_and_nothing_is_captured() -> None:
    call = read_tool_call(_span(None, None))
    assert call.name == "DynamicStructuredTool"
    assert classify(_span(None, None)) is SpanKind.TOOL


def test_other_task_spans_are_left_to_their_conventions() -> None:
    # OpenLLMetry LlamaIndex's call_tool step: a task span with tool.name (conventions.llamaindex)
    span = record("call_tool.task", {"traceloop.span.kind": "task", "tool.name": "search",
                                     "tool.arguments": '{"q": "x"}', "traceloop.entity.output": '"0 results"'})
    call = read_tool_call(span)
    assert (call.name, call.arguments) == ("search", '{"q": "x"}')
