"""Google ADK's native instrumentation (``google/adk/telemetry/tracing.py``
``trace_tool_call``): the legacy keys ``gcp.vertex.agent.tool_call_args`` /
``gcp.vertex.agent.tool_response`` (a non-map response wrapped as ``{"result": ...}``), the
placeholders written with content capture off, and the current GenAI keys."""

from __future__ import annotations

import json

from otel_progress.conventions.spans import SpanKind, classify, read_tool_call
from otel_progress.model import NOT_CAPTURED

from .helpers import record


def _span(args: object, response: object) -> object:
    return record("execute_tool search", {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search", "gen_ai.tool.call.id": "adk-1",
        "gcp.vertex.agent.tool_call_args": args, "gcp.vertex.agent.tool_response": response,
        "gcp.vertex.agent.llm_request": "{}", "gcp.vertex.agent.llm_response": "{}"})


def test_legacy_keys() -> None:
    call = read_tool_call(_span(json.dumps({"q": "x"}), json.dumps({"result": "0 results"})))
    assert (call.name, call.arguments, call.result) == ("search", json.dumps({"q": "x"}), "0 results")
    mapped = read_tool_call(_span(json.dumps({"q": "x"}), json.dumps({"hits": [], "total": 0})))
    assert mapped.result == json.dumps({"hits": [], "total": 0})


def test_placeholders_are_no_content() -> None:
    for args, response in (("{}", "{}"), ("N/A", '{"result": "<not specified>"}')):
        call = read_tool_call(_span(args, response))
        assert call.arguments is NOT_CAPTURED and call.result is NOT_CAPTURED


def test_tool_span_named_before_its_attributes() -> None:
    assert classify(record("execute_tool search", {})) is SpanKind.TOOL
