"""OpenTelemetry GenAI semantic conventions: attributes, message parts, late agent kinds.

Shapes from the semantic conventions (``model/gen-ai/spans.yaml``; the ``tool_call`` /
``tool_call_response`` parts of ``gen_ai.input.messages`` / ``gen_ai.output.messages``),
``opentelemetry-util-genai`` (``SPAN_ONLY`` content on the span) and Google ADK's
``invoke_agent {agent}`` span, whose ``gen_ai.operation.name`` is set after it started.
"""

from __future__ import annotations

import json

from otel_progress.conventions.spans import SpanKind, agent_name, classify, read_tokens, read_tool_call
from otel_progress.model import NOT_CAPTURED

from .helpers import record


def test_tool_span_with_content_attributes() -> None:
    span = record("execute_tool search", {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
        "gen_ai.tool.call.arguments": '{"q": "x"}', "gen_ai.tool.call.result": "0 results"})
    assert classify(span) is SpanKind.TOOL
    call = read_tool_call(span)
    assert (call.name, call.arguments, call.result) == ("search", '{"q": "x"}', "0 results")


def test_tool_span_without_content_is_not_captured() -> None:
    span = record("execute_tool search", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"})
    call = read_tool_call(span)
    assert call.arguments is NOT_CAPTURED and call.result is NOT_CAPTURED


def test_message_parts_on_the_span_and_in_details_events() -> None:
    inp = [{"role": "tool", "parts": [{"type": "tool_call", "name": "search", "id": "call_1",
                                       "arguments": {"q": "x"}}]}]
    out = [{"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "0 results"}]}]
    on_span = record("execute_tool search", {"gen_ai.operation.name": "execute_tool",
                                             "gen_ai.input.messages": json.dumps(inp),
                                             "gen_ai.output.messages": json.dumps(out)})
    in_events = record("execute_tool search", {"gen_ai.operation.name": "execute_tool"}, events=[
        ("gen_ai.client.inference.operation.details", {"gen_ai.input.messages": json.dumps(inp)}),
        ("gen_ai.client.inference.operation.details", {"gen_ai.output.messages": json.dumps(out)}),
    ])
    for span in (on_span, in_events):
        call = read_tool_call(span)
        assert (call.name, call.arguments, call.result) == ("search", {"q": "x"}, "0 results")


def test_agent_span_known_by_name_before_its_operation_is_set() -> None:
    started = record("invoke_agent planner", {})
    assert classify(started) is SpanKind.AGENT
    assert agent_name(started) == "planner"
    ended = record("invoke_agent planner", {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"})
    assert classify(ended) is SpanKind.AGENT and agent_name(ended) == "planner"
    # a span named so but with another operation is what its operation says
    assert classify(record("invoke_agent x", {"gen_ai.operation.name": "chat"})) is SpanKind.MODEL


def test_model_tokens_current_deprecated_and_total() -> None:
    assert read_tokens(record("chat m", {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 10,
                                         "gen_ai.usage.output_tokens": 5})) == 15
    assert read_tokens(record("chat m", {"gen_ai.usage.prompt_tokens": 7, "gen_ai.usage.completion_tokens": 3})) == 10
    assert read_tokens(record("chat m", {"gen_ai.operation.name": "chat", "gen_ai.usage.total_tokens": 9})) == 9
    assert classify(record("x", {"gen_ai.usage.input_tokens": 1})) is SpanKind.MODEL
