"""Strands Agents' native instrumentation (``strands/telemetry/tracer.py``
``start_tool_call_span`` / ``end_tool_call_span``): by default the content is only in span
events, ``gen_ai.tool.message`` (``role``, ``content`` = JSON of the input, ``id``) and
``gen_ai.choice`` (``message`` = JSON of the content blocks, ``id``); with
``gen_ai_latest_experimental`` it is in ``gen_ai.client.inference.operation.details`` events
(``tool_call`` / ``tool_call_response`` parts)."""

from __future__ import annotations

import json

from otel_progress.conventions.spans import SpanKind, classify, read_tool_call

from .helpers import record

_ATTRS = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search", "gen_ai.tool.call.id": "tooluse_1",
          "gen_ai.system": "strands-agents"}


def test_default_events() -> None:
    span = record("execute_tool search", _ATTRS, events=[
        ("gen_ai.tool.message", {"role": "tool", "content": json.dumps({"q": "x"}), "id": "tooluse_1"}),
        ("gen_ai.choice", {"message": json.dumps([{"text": "0 results"}]), "id": "tooluse_1"}),
    ])
    assert classify(span) is SpanKind.TOOL
    call = read_tool_call(span)
    assert (call.name, call.arguments, call.result) == ("search", json.dumps({"q": "x"}), "0 results")


def test_latest_experimental_events() -> None:
    inp = [{"role": "tool", "parts": [{"type": "tool_call", "name": "search", "id": "tooluse_2",
                                       "arguments": {"q": "x"}}]}]
    out = [{"role": "tool", "parts": [{"type": "tool_call_response", "id": "tooluse_2",
                                       "response": [{"json": {"hits": []}}]}]}]
    span = record("execute_tool search", _ATTRS, events=[
        ("gen_ai.client.inference.operation.details", {"gen_ai.input.messages": json.dumps(inp)}),
        ("gen_ai.client.inference.operation.details", {"gen_ai.output.messages": json.dumps(out)}),
    ])
    call = read_tool_call(span)
    assert (call.arguments, call.result) == ({"q": "x"}, {"hits": []})


def test_several_blocks_stay_a_list() -> None:
    blocks = [{"text": "a"}, {"text": "b"}]
    span = record("execute_tool search", _ATTRS, events=[("gen_ai.choice", {"message": json.dumps(blocks)})])
    assert read_tool_call(span).result == json.dumps(blocks)
