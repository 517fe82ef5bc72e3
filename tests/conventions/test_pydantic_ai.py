"""Pydantic AI's native instrumentation (``pydantic_ai/_instrumentation.py``
``InstrumentationNames.for_version``): version 2 names the tool span ``running tool`` and
puts the content in ``tool_arguments`` / ``tool_response``; the agent span ``agent run``
has ``agent_name``. Version 3+ is plain GenAI (``execute_tool {tool}``,
``gen_ai.tool.call.*``)."""

from __future__ import annotations

from otel_progress.conventions.spans import SpanKind, agent_name, classify, read_tool_call

from .helpers import record


def test_version_2_tool_span() -> None:
    span = record("running tool", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                                   "gen_ai.tool.call.id": "call_1", "tool_arguments": '{"q":"x"}',
                                   "tool_response": "0 results", "logfire.msg": "running tool: search"})
    assert classify(span) is SpanKind.TOOL
    call = read_tool_call(span)
    assert (call.name, call.arguments, call.result) == ("search", '{"q":"x"}', "0 results")


def test_version_2_agent_span_and_version_3_tool_span() -> None:
    agent = record("agent run", {"gen_ai.operation.name": "invoke_agent", "agent_name": "helper",
                                 "logfire.msg": "helper run"})
    assert classify(agent) is SpanKind.AGENT and agent_name(agent) == "helper"
    v3 = record("execute_tool search", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                                        "gen_ai.tool.call.arguments": '{"q":"x"}', "gen_ai.tool.call.result": "r"})
    call = read_tool_call(v3)
    assert (call.arguments, call.result) == ('{"q":"x"}', "r")
