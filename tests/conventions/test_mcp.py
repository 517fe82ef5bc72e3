"""MCP ``tools/call`` spans: the semantic conventions (``model/mcp/spans.yaml``; the MCP
Python SDK's server middleware ``mcp/server/_otel.py``: span ``tools/call {tool}``,
``mcp.method.name``, ``gen_ai.operation.name=execute_tool``, ``gen_ai.tool.name``,
``error.type=tool_error``) and the SDK's own request spans (``mcp/shared/session.py``:
``MCP send tools/call {tool}`` / ``MCP handle tools/call {tool}`` with only
``mcp.method.name`` and ``jsonrpc.request.id``)."""

from __future__ import annotations

from otel_progress.conventions.spans import SpanKind, classify, read_tool_call
from otel_progress.model import NOT_CAPTURED

from .helpers import record


def test_semconv_span() -> None:
    span = record("tools/call search", {"mcp.method.name": "tools/call", "gen_ai.tool.name": "search",
                                        "gen_ai.tool.call.arguments": '{"q": "x"}',
                                        "gen_ai.tool.call.result": "none", "error.type": "tool_error"})
    assert classify(span) is SpanKind.TOOL
    call = read_tool_call(span)
    assert (call.name, call.arguments, call.result, call.error) == ("search", '{"q": "x"}', "none", True)


def test_sdk_request_spans_name_the_tool_without_content() -> None:
    for name in ("MCP send tools/call search", "MCP handle tools/call search"):
        span = record(name, {"mcp.method.name": "tools/call", "jsonrpc.request.id": "3"})
        call = read_tool_call(span)
        assert classify(span) is SpanKind.TOOL
        assert call.name == "search" and call.arguments is NOT_CAPTURED and call.result is NOT_CAPTURED
    assert classify(record("MCP send tools/call search", {})) is SpanKind.TOOL  # before its attributes


def test_other_methods_are_not_tool_calls() -> None:
    assert classify(record("MCP send tools/list", {"mcp.method.name": "tools/list"})) is SpanKind.OTHER
    assert classify(record("MCP send initialize", {})) is SpanKind.OTHER


def test_mcp_results_reduced_to_their_text() -> None:
    """The OpenAI Agents SDK (``agents/mcp/util.py`` ``MCPUtil.invoke_mcp_tool``) passes
    ``result.content[0].model_dump_json()`` on as the tool output; a ``CallToolResult``
    (``mcp.types``) may be recorded whole."""
    import json

    block = json.dumps({"type": "text", "text": "0 results", "annotations": None, "meta": None})
    blocks = json.dumps([{"type": "text", "text": "a", "annotations": None}, {"type": "text", "text": "b"}])
    whole = json.dumps({"meta": None, "content": [{"type": "text", "text": "0 results"}], "isError": False})
    structured = json.dumps({"content": [{"type": "text", "text": "{}"}], "structuredContent": {"hits": []},
                             "isError": False})
    for result, expected in ((block, "0 results"), (blocks, ["a", "b"]), (whole, "0 results"),
                             (structured, {"hits": []})):
        span = record("execute_tool search", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                                              "gen_ai.tool.call.result": result})
        assert read_tool_call(span).result == expected, result
    other = json.dumps({"type": "text", "text": "x", "score": 3})  # not a content block: left alone
    assert read_tool_call(record("execute_tool s", {"gen_ai.operation.name": "execute_tool",
                                                    "gen_ai.tool.call.result": other})).result == other


# -- the stateless 2026-07-28 revision ----------------------------------------------------


def test_2026_07_28_spans_are_read_without_a_session() -> None:
    from otel_progress.conventions import read_tool
    from otel_progress.conventions.spans import SpanKind, classify

    from .helpers import record

    base = {"mcp.protocol.version": "2026-07-28", "jsonrpc.request.id": "7"}
    call = record("tools/call get_weather", {**base, "mcp.method.name": "tools/call",
                                             "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                                             "gen_ai.tool.call.arguments": '{"city": "Oslo"}'})
    assert classify(call) is SpanKind.TOOL and read_tool(call).name == "get_weather"
    for method in ("server/discover", "subscriptions/listen", "notifications/subscriptions/acknowledged"):
        assert classify(record(method, {**base, "mcp.method.name": method})) is SpanKind.OTHER


def test_an_input_required_round_is_reduced_without_its_request_state() -> None:
    import json

    from otel_progress.conventions import reduce_result

    asks = {"confirm": {"method": "elicitation/create", "params": {"message": "Delete 3 files?"}}}
    first = json.dumps({"resultType": "input_required", "inputRequests": asks, "requestState": "opaque-1"})
    again = json.dumps({"resultType": "input_required", "inputRequests": asks, "requestState": "opaque-2"})
    assert reduce_result(first) == reduce_result(again) == {"input_required": asks}
    final = {"resultType": "complete", "content": [{"type": "text", "text": "deleted"}], "isError": False}
    assert reduce_result(final) == "deleted"
    assert reduce_result(json.dumps(final)) == "deleted"
    other = {"resultType": "input_required", "inputRequests": asks, "note": "a tool's own output"}
    assert reduce_result(other) is other  # an unknown key: not the envelope
