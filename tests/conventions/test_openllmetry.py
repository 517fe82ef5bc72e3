"""OpenLLMetry / Traceloop: tool spans and the envelopes its instrumentations write.

Shapes from ``traceloop/openllmetry``:

* LangChain/LangGraph (``opentelemetry-instrumentation-langchain``, ``callback_handler.py``
  ``on_tool_start`` / ``on_tool_end``): ``traceloop.entity.input`` and
  ``gen_ai.tool.call.arguments`` are both ``json.dumps({"input_str", "tags", "metadata",
  "inputs", "kwargs"})``; the output ``json.dumps({"output", "kwargs"})`` with the
  ``ToolMessage`` serialised by ``to_json()`` (``CallbackFilteredJSONEncoder``).
* MCP client (``opentelemetry-instrumentation-mcp``, ``instrumentation.py``
  ``_handle_tool_call``): span ``{tool}.tool``, input ``{"tool_name", "arguments"}``, output
  ``{"result": text}`` (``"is_error": true`` on a failed call); its FastMCP server
  (``fastmcp_instrumentation.py``): output ``[{"type": "text", "content": text}]``.
* ``traceloop-sdk`` ``@tool`` (``decorators/base.py``): input ``{"args": [...], "kwargs": {...}}``,
  output ``json.dumps(result)``.
"""

from __future__ import annotations

import json

from otel_progress.conventions.spans import SpanKind, agent_name, classify, read_tool_call

from .helpers import record


def _langgraph_tool(step: int, query: str, result: str) -> object:
    metadata = {"langgraph_step": step, "langgraph_node": "tools", "checkpoint_ns": f"tools:{step:08x}-uuid"}
    payload = json.dumps({"input_str": str({"query": query}), "tags": ["seq:step:1"], "metadata": metadata,
                          "inputs": {"query": query}, "kwargs": {"name": "search", "tool_call_id": f"call_{step}"}})
    message = {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "ToolMessage"],
               "kwargs": {"content": result, "type": "tool", "name": "search", "tool_call_id": f"call_{step}",
                          "status": "success"}}
    output = json.dumps({"output": message, "kwargs": {"color": "green", "name": "search"}})
    return record("execute_tool search", {
        "traceloop.span.kind": "tool", "traceloop.entity.name": "search", "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search", "traceloop.entity.input": payload, "gen_ai.tool.call.arguments": payload,
        "traceloop.entity.output": output, "gen_ai.tool.call.result": output})


def test_langgraph_callback_payload_reduced_to_the_tool_input_and_output() -> None:
    a = read_tool_call(_langgraph_tool(2, "cats", "0 results"))
    b = read_tool_call(_langgraph_tool(4, "cats", "0 results"))
    assert a.name == "search"
    assert a.arguments == b.arguments == {"query": "cats"}
    assert a.result == b.result == "0 results"


def test_callback_payload_without_inputs_falls_back_to_input_str() -> None:
    payload = json.dumps({"input_str": "cats", "tags": None, "metadata": {}, "inputs": None, "kwargs": {}})
    span = record("execute_tool search", {"traceloop.span.kind": "tool", "traceloop.entity.name": "search",
                                          "traceloop.entity.input": payload})
    assert read_tool_call(span).arguments == "cats"


def test_mcp_client_tool_span() -> None:
    span = record("search.tool", {
        "traceloop.span.kind": "tool", "traceloop.entity.name": "search",
        "traceloop.entity.input": json.dumps({"tool_name": "search", "arguments": {"q": "x"}}),
        "traceloop.entity.output": json.dumps({"result": "0 results"})})
    assert classify(span) is SpanKind.TOOL
    call = read_tool_call(span)
    assert (call.name, call.arguments, call.result) == ("search", {"q": "x"}, "0 results")


def test_fastmcp_server_output_and_text_results() -> None:
    server = record("search.tool", {"traceloop.span.kind": "tool", "traceloop.entity.name": "search",
                                    "traceloop.entity.output": json.dumps([{"type": "text", "content": "none"}])})
    assert read_tool_call(server).result == "none"
    decorated = record("search.tool", {"traceloop.span.kind": "tool", "traceloop.entity.name": "search",
                                       "traceloop.entity.input": json.dumps({"args": [], "kwargs": {"q": "x"}}),
                                       "traceloop.entity.output": json.dumps("0 results")})
    call = read_tool_call(decorated)
    assert call.arguments == {"q": "x"} and call.result == "0 results"


def test_name_from_the_span_name_and_agent_spans() -> None:
    assert read_tool_call(record("lookup.tool", {"traceloop.span.kind": "tool"})).name == "lookup"
    agent = record("planner.agent", {"traceloop.span.kind": "agent", "traceloop.entity.name": "planner"})
    assert classify(agent) is SpanKind.AGENT and agent_name(agent) == "planner"
    assert classify(record("x.task", {"traceloop.span.kind": "task"})) is SpanKind.OTHER


def test_identical_langgraph_calls_caught_as_early_as_plain_ones(tmp_path) -> None:
    """Through ``otel-progress scan``: the envelopes (a fresh ``langgraph_step`` and
    ``checkpoint_ns`` each call) no longer make identical calls look new."""
    from otel_progress.scan import scan_paths
    from tests.otlp_builder import attrs

    from .otlp import T0, S, hex_id, write

    trace = hex_id("trace:langgraph", 16)
    agent = hex_id("span:agent", 8)
    spans = []
    for step in range(1, 4):
        rec = _langgraph_tool(step, "cats", "0 results")
        spans.append({"traceId": trace, "spanId": hex_id(f"span:{step}", 8), "parentSpanId": agent,
                      "name": rec.name, "kind": 1, "startTimeUnixNano": str(T0 + step * S),
                      "endTimeUnixNano": str(T0 + step * S + S // 10), "attributes": attrs(dict(rec.attributes))})
    spans.append({"traceId": trace, "spanId": agent, "parentSpanId": "", "name": "LangGraph.workflow", "kind": 1,
                  "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 10 * S),
                  "attributes": attrs({"traceloop.span.kind": "agent", "traceloop.entity.name": "LangGraph"})})
    doc = {"resourceSpans": [{"resource": {"attributes": attrs({"service.name": "lg"})},
                              "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]}
    result = scan_paths([str(write(tmp_path / "lg.jsonl", [doc]))])
    assert [(d.reason.value, d.turn) for d in result.detections][:1] == [("repeat_cycle", 2)]
