"""OpenInference: span kinds, ``input.value`` / ``output.value``, and the framework objects
its instrumentations serialise whole as the output.

Shapes: ``openinference-instrumentation`` (``_tracers.py``: ``openinference.span.kind=TOOL``,
``tool.name``, ``input.value`` = JSON of the bound arguments); the LlamaIndex
instrumentation's output, a ``ToolOutput`` (``llama_index.core.tools.types.ToolOutput``:
``content``, ``tool_name``, ``raw_input``, ``raw_output``, ``is_error``); the Google ADK
instrumentation's output (``openinference-instrumentation-google-adk``, ``_wrappers.py``
``_TraceToolCall``: ``responses[0].model_dump_json(exclude_none=True)``), a function
response (``google.genai.types.FunctionResponse``: ``id``, ``name``, ``response``) whose
``id`` is new every call.
"""

from __future__ import annotations

import json

from otel_progress.conventions.spans import SpanKind, agent_name, classify, read_tokens, read_tool_call
from otel_progress.model import NOT_CAPTURED

from .helpers import record


def _tool(output: object, arguments: object = '{"q": "x"}') -> object:
    return record("search", {"openinference.span.kind": "TOOL", "tool.name": "search",
                             "input.value": arguments, "output.value": output})


def test_kinds() -> None:
    assert classify(_tool("r")) is SpanKind.TOOL
    assert classify(record("a", {"openinference.span.kind": "agent"})) is SpanKind.AGENT
    assert classify(record("m", {"openinference.span.kind": "LLM"})) is SpanKind.MODEL
    assert classify(record("c", {"openinference.span.kind": "CHAIN"})) is SpanKind.OTHER


def test_llamaindex_tool_output_reduced_to_the_raw_output() -> None:
    def output(query: str) -> str:
        return json.dumps({"content": "[]", "tool_name": "search", "raw_input": {"args": [], "kwargs": {"q": query}},
                           "raw_output": [], "is_error": False})
    first, second = read_tool_call(_tool(output("cats"))), read_tool_call(_tool(output("felines")))
    assert first.result == [] and second.result == []  # the rephrased empty search looks the same


def test_adk_function_response_reduced_to_the_response() -> None:
    def output(call_id: str) -> str:
        return json.dumps({"id": call_id, "name": "search", "response": {"result": "0 results"}})
    a, b = read_tool_call(_tool(output("adk-1"))), read_tool_call(_tool(output("adk-2")))
    assert a.result == b.result == {"result": "0 results"}


def test_a_tool_result_that_merely_has_a_content_key_is_left_alone() -> None:
    value = json.dumps({"content": "x", "tool_name": "search"})
    assert read_tool_call(_tool(value)).result == value


def test_agent_name_and_tokens() -> None:
    assert agent_name(record("Agent", {"openinference.span.kind": "AGENT", "agent.name": "writer"})) == "writer"
    assert agent_name(record("Agent", {"openinference.span.kind": "AGENT"})) == "Agent"
    assert read_tokens(record("m", {"openinference.span.kind": "LLM", "llm.token_count.prompt": 4,
                                    "llm.token_count.completion": 2})) == 6
    assert read_tokens(record("m", {"openinference.span.kind": "LLM", "llm.token_count.total": 8})) == 8


def test_values_hidden_by_openinference_settings_are_not_content() -> None:
    # OPENINFERENCE_HIDE_INPUTS/OUTPUTS=true write "__REDACTED__": identical on every call,
    # so read as content it would make every call a repeat
    call = read_tool_call(_tool("__REDACTED__", arguments="__REDACTED__"))
    assert call.name == "search"
    assert call.arguments is NOT_CAPTURED and call.result is NOT_CAPTURED
    assert read_tool_call(_tool("__REDACTED__")).arguments == '{"q": "x"}'  # only the hidden side is lost
