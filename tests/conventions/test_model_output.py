"""The model's side of a step: what each convention reads from an inference span's output
(text, reasoning, requested tool calls with their ids) and from its input (the latest user
message), in the shapes the instrumentations write (each test cites the source file the
shape was read in), and that the readers are total and keep outputs small."""

from __future__ import annotations

import json
import math

import pytest

from otel_progress import NOT_CAPTURED
from otel_progress.conventions import CONVENTIONS, read_model_output
from otel_progress.conventions.outputs import MAX_PART
from otel_progress.conventions.spans import read_tool_call
from otel_progress.model import ToolRequest

from .helpers import record

_CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o", "gen_ai.usage.input_tokens": 900,
         "gen_ai.usage.output_tokens": 40}


def _png(size: int, fill: str = "A") -> str:
    """A base64 PNG payload of ``size`` characters (its first bytes name the format)."""
    return "iVBORw0KGgoAAAANSUhEUgAA" + fill * (size - 24)


# -- OpenTelemetry GenAI -----------------------------------------------------------------------


def test_genai_output_messages_on_the_span() -> None:
    # opentelemetry-util-genai opentelemetry/util/genai/types.py (OutputMessage, TextPart,
    # ReasoningPart, ToolCallRequestPart, ServerToolCallPart, BlobPart, FilePart, UriPart),
    # serialized by utils.py gen_ai_json_dumps (dataclasses as dicts, bytes as base64)
    output = [{"role": "assistant", "parts": [
        {"content": "The build needs the cache flag.", "type": "reasoning"},
        {"content": "Let me look at the log.", "type": "text"},
        {"arguments": {"path": "build.log"}, "name": "read_file", "id": "call_Qx1", "type": "tool_call"},
        {"name": "web_search", "server_tool_call": {"query": "x"}, "id": "srv_1", "type": "server_tool_call"},
        {"mime_type": "image/png", "modality": "image", "content": _png(6000), "type": "blob"},
        {"mime_type": "application/pdf", "modality": "document", "file_id": "file-abc", "type": "file"},
        {"mime_type": "image/jpeg", "modality": "image", "uri": "https://example.com/a.jpg", "type": "uri"},
        {"id": None, "content": None, "type": "compaction"},
    ], "finish_reason": "tool_call"}]
    inputs = [
        {"role": "system", "parts": [{"content": "You are a build agent.", "type": "text"}]},
        {"role": "user", "parts": [{"content": "Why does the build fail?", "type": "text"}]},
        {"role": "assistant", "parts": [{"arguments": {}, "name": "ls", "id": "call_0", "type": "tool_call"}]},
        # a user turn made only of tool results is no new question
        {"role": "user", "parts": [{"response": "a b c", "id": "call_0", "type": "tool_call_response"}]},
    ]
    span = record("chat gpt-4o", {**_CHAT, "gen_ai.output.messages": json.dumps(output, separators=(",", ":")),
                                  "gen_ai.input.messages": json.dumps(inputs)})
    out = read_model_output(span, run_id="r1", agent="builder")
    assert out is not None and out.captured
    assert out.text == ("Let me look at the log.\n<blob image/png ~8KiB>\n<file application/pdf file-abc>\n"
                        "<uri image/jpeg https://example.com/a.jpg>")
    assert out.reasoning == "The build needs the cache flag."
    assert out.requests == (ToolRequest("read_file", {"path": "build.log"}, "call_Qx1"),)  # no server tool call
    assert out.prompt == "Why does the build fail?"
    assert (out.trace_id, out.span_id, out.run_id, out.agent) == (span.trace_id, span.span_id, "r1", "builder")
    assert (out.start_ns, out.end_ns) == (span.start_ns, span.end_ns)


def test_genai_output_in_the_details_event() -> None:
    # strands/telemetry/tracer.py end_model_invoke_span with gen_ai_latest_experimental: a
    # gen_ai.client.inference.operation.details event; parts from _map_content_blocks_to_otel_parts
    output = json.dumps([{"role": "assistant", "parts": [
        {"type": "text", "content": "Checking the weather."},
        {"type": "tool_call", "name": "get_weather", "id": "tooluse_8", "arguments": {"city": "Paris"}}],
        "finish_reason": "tool_use"}])
    inputs = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}])
    span = record("chat", _CHAT, events=[
        ("gen_ai.client.inference.operation.details", {"gen_ai.input.messages": inputs}),
        ("gen_ai.client.inference.operation.details", {"gen_ai.output.messages": output})])
    out = read_model_output(span)
    assert out is not None
    assert out.text == "Checking the weather."
    assert out.requests == (ToolRequest("get_weather", {"city": "Paris"}, "tooluse_8"),)
    assert out.prompt == "Weather in Paris?"


def test_genai_older_choice_and_user_message_events() -> None:
    # strands/telemetry/tracer.py end_model_invoke_span without the opt-in: a gen_ai.choice event
    # whose message is the serialized content blocks (text, toolUse, reasoningContent);
    # _add_event_messages: gen_ai.user.message events with the content blocks
    blocks = [{"reasoningContent": {"reasoningText": {"text": "Need the forecast."}}},
              {"text": "Looking it up."},
              {"toolUse": {"toolUseId": "tooluse_1", "name": "forecast", "input": {"days": 3}}}]
    span = record("chat", _CHAT, events=[
        ("gen_ai.user.message", {"content": json.dumps([{"text": "Forecast for Oslo?"}])}),
        ("gen_ai.user.message", {"content": json.dumps([{"toolResult": {"toolUseId": "t0", "content": []}}])}),
        ("gen_ai.choice", {"finish_reason": "tool_use", "message": json.dumps(blocks)})])
    out = read_model_output(span)
    assert out is not None
    assert (out.text, out.reasoning) == ("Looking it up.", "Need the forecast.")
    assert out.requests == (ToolRequest("forecast", {"days": 3}, "tooluse_1"),)
    assert out.prompt == "Forecast for Oslo?"
    # an OpenAI-style message in a gen_ai.choice event
    span = record("chat", _CHAT, events=[("gen_ai.choice", {"index": 0, "message": json.dumps(
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "ls", "arguments": "{\"dir\": \".\"}"}}]})})])
    out = read_model_output(span)
    assert out is not None and out.text is None
    assert out.requests == (ToolRequest("ls", {"dir": "."}, "call_9"),)


def test_ai_sdk_7_chat_span_is_read_as_genai() -> None:
    # @ai-sdk/otel 1.0.173 src/open-telemetry.ts onLanguageModelCallEnd (the chat span under the
    # agent_step span) and src/gen-ai-format-messages.ts: tool_call arguments = part.input (JSON text)
    output = json.dumps([{"role": "assistant", "parts": [
        {"type": "reasoning", "content": "search first"},
        {"type": "tool_call", "id": "call_1", "name": "search_docs", "arguments": "{\"query\":\"refund\"}"}],
        "finish_reason": "tool_call"}])
    span = record("chat scripted", {"gen_ai.operation.name": "chat", "gen_ai.output.messages": output,
                                    "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 5})
    out = read_model_output(span)
    assert out is not None
    assert out.requests == (ToolRequest("search_docs", {"query": "refund"}, "call_1"),)
    assert (out.text, out.reasoning) == (None, "search first")


# -- Pydantic AI -------------------------------------------------------------------------------


def test_pydantic_ai_parts() -> None:
    # pydantic_ai/messages.py (pydantic-ai-slim 2.68.0) ModelResponse.otel_message_parts:
    # ThinkingPart -> {"type": "thinking"}, a native (built-in) tool call -> "builtin": true,
    # _convert_binary_to_otel_part -> a blob without content unless include_binary_content;
    # models/instrumented.py handle_messages puts them in gen_ai.output.messages
    output = json.dumps([{"role": "assistant", "parts": [
        {"type": "thinking", "content": "The user wants the total."},
        {"type": "tool_call", "id": "pyd_ai_7", "name": "web_search", "builtin": True},
        {"type": "tool_call", "id": "pyd_ai_8", "name": "add", "arguments": {"a": 1, "b": 2}},
        {"type": "blob", "mime_type": "image/png", "modality": "image"},
        {"type": "text", "content": "Adding."}], "finish_reason": "tool_call"}])
    span = record("chat gpt-4o", {**_CHAT, "gen_ai.output.messages": output, "logfire.msg": "chat gpt-4o"})
    out = read_model_output(span)
    assert out is not None
    assert out.reasoning == "The user wants the total."
    assert out.requests == (ToolRequest("add", {"a": 1, "b": 2}, "pyd_ai_8"),)
    assert out.text == "<blob image/png>\nAdding."


def test_pydantic_ai_version_1_events_attribute() -> None:
    # pydantic-ai before 1.0, InstrumentationSettings(event_mode="attributes"): the messages as one
    # `events` attribute, each event body with its event.name (models/instrumented.py)
    events = [
        {"event.name": "gen_ai.system.message", "content": "Be brief.", "role": "system"},
        {"event.name": "gen_ai.user.message", "content": "What is 2+2?", "role": "user"},
        {"event.name": "gen_ai.choice", "index": 0, "message": {"role": "assistant", "content": "4",
         "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "final_result",
                                                                       "arguments": "{\"n\": 4}"}}]}},
    ]
    span = record("chat gpt-4o", {**_CHAT, "events": json.dumps(events), "logfire.msg": "chat gpt-4o"})
    out = read_model_output(span)
    assert out is not None
    assert (out.text, out.prompt) == ("4", "What is 2+2?")
    assert out.requests == (ToolRequest("final_result", {"n": 4}, "call_1"),)


# -- OpenInference -----------------------------------------------------------------------------


def test_openinference_flattened_messages() -> None:
    # openinference/semconv/trace/__init__.py: SpanAttributes.LLM_OUTPUT_MESSAGES / LLM_INPUT_MESSAGES,
    # MessageAttributes (message.role, .content, .contents, .tool_calls), MessageContentAttributes
    # (message_content.type "text" / "reasoning" / "image", .text), ToolCallAttributes
    # (tool_call.id, tool_call.function.name, tool_call.function.arguments)
    a = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o", "llm.token_count.prompt": 50,
         "llm.input_messages.0.message.role": "system", "llm.input_messages.0.message.content": "Be useful.",
         "llm.input_messages.1.message.role": "user",
         "llm.input_messages.1.message.contents.0.message_content.type": "text",
         "llm.input_messages.1.message.contents.0.message_content.text": "List the files.",
         "llm.input_messages.2.message.role": "tool", "llm.input_messages.2.message.content": "a.py",
         "llm.output_messages.0.message.role": "assistant",
         "llm.output_messages.0.message.contents.0.message_content.type": "reasoning",
         "llm.output_messages.0.message.contents.0.message_content.text": "ls again",
         "llm.output_messages.0.message.contents.1.message_content.type": "text",
         "llm.output_messages.0.message.contents.1.message_content.text": "Listing.",
         "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_A",
         "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "ls",
         "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{\"dir\": \"src\"}",
         "llm.output_messages.0.message.tool_calls.1.tool_call.id": "call_B",
         "llm.output_messages.0.message.tool_calls.1.tool_call.function.name": "cat",
         "llm.output_messages.0.message.tool_calls.1.tool_call.function.arguments": "{\"path\": \"a.py\"}"}
    out = read_model_output(record("ChatOpenAI", a))
    assert out is not None
    assert (out.text, out.reasoning, out.prompt) == ("Listing.", "ls again", "List the files.")
    assert out.requests == (ToolRequest("ls", {"dir": "src"}, "call_A"), ToolRequest("cat", {"path": "a.py"}, "call_B"))
    # the usual LangChain shape: message.content only, no tool call
    out = read_model_output(record("ChatOpenAI", {"openinference.span.kind": "LLM",
                                                  "llm.output_messages.0.message.role": "assistant",
                                                  "llm.output_messages.0.message.content": "Done."}))
    assert out is not None and (out.text, out.requests, out.prompt) == ("Done.", (), None)


def test_openinference_reasoning_left_out_of_the_messages_is_read_from_output_value() -> None:
    # openinference-instrumentation-openai-agents 2.6.0 (`generation` span) and
    # openinference-instrumentation-langchain 0.1.80 (`LLMResult`) flatten `content` and
    # `tool_calls` only: a reasoning-only response leaves `llm.output_messages` with its role
    # alone, the reasoning only in the raw `output.value` (tests/frameworks/FINDINGS.md)
    base = {"openinference.span.kind": "LLM", "llm.output_messages.0.message.role": "assistant",
            "output.mime_type": "application/json"}
    agents = {**base, "output.value": json.dumps([{"content": None, "role": "assistant", "tool_calls": None,
                                                   "reasoning_content": "Look the order up first."}])}
    langchain = {**base, "output.value": json.dumps({"generations": [[{"text": "", "message": {
        "lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "AIMessage"],
        "kwargs": {"content": [{"type": "reasoning", "reasoning": "Look the order up first."}],
                   "tool_calls": []}}}]]})}
    for attributes in (agents, langchain):
        out = read_model_output(record("generation", attributes))
        assert out is not None and out.reasoning == "Look the order up first." and out.text is None
    # reasoning the messages carry is not read twice; an output.value that names none is not decoded
    both = {**agents, "llm.output_messages.0.message.contents.0.message_content.type": "reasoning",
            "llm.output_messages.0.message.contents.0.message_content.text": "From the messages."}
    out = read_model_output(record("generation", both))
    assert out is not None and out.reasoning == "From the messages."
    plain = {**base, "llm.output_messages.0.message.content": "Done.",
             "output.value": json.dumps([{"content": "Done.", "role": "assistant"}])}
    out = read_model_output(record("generation", plain))
    assert out is not None and (out.text, out.reasoning) == ("Done.", None)


# -- OpenLLMetry -------------------------------------------------------------------------------


def test_openllmetry_completion_keys() -> None:
    # opentelemetry-instrumentation-openai shared/chat_wrappers.py _set_prompts / _set_completions
    # (gen_ai.prompt.{i}.role/.content, gen_ai.completion.{i}.role/.content/.finish_reason,
    # .tool_calls.{j}.id/.name/.arguments; the older .function_call.name/.arguments)
    a = {"llm.request.type": "chat", "gen_ai.usage.prompt_tokens": 30, "gen_ai.usage.completion_tokens": 9,
         "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "You help.",
         "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "Open the ticket.",
         "gen_ai.prompt.2.role": "tool", "gen_ai.prompt.2.content": "{}",
         "gen_ai.completion.0.finish_reason": "tool_calls", "gen_ai.completion.0.role": "assistant",
         "gen_ai.completion.0.content": "Opening it.",
         "gen_ai.completion.0.tool_calls.0.id": "call_T", "gen_ai.completion.0.tool_calls.0.name": "open_ticket",
         "gen_ai.completion.0.tool_calls.0.arguments": "{\"id\": 42}"}
    out = read_model_output(record("openai.chat", a))
    assert out is not None
    assert (out.text, out.prompt) == ("Opening it.", "Open the ticket.")
    assert out.requests == (ToolRequest("open_ticket", {"id": 42}, "call_T"),)
    older = {"gen_ai.usage.prompt_tokens": 3, "gen_ai.completion.0.role": "assistant",
             "gen_ai.completion.0.function_call.name": "lookup", "gen_ai.completion.0.function_call.arguments": "{}"}
    out = read_model_output(record("openai.chat", older))
    assert out is not None and out.requests == (ToolRequest("lookup", {}, None),)


def test_openllmetry_js_llm_span() -> None:
    # @traceloop/node-server-sdk 0.27.0 dist/index.mjs LLMSpan.reportRequest / reportResponse
    a = {"llm.request.type": "chat", "gen_ai.request.model": "gpt-4o", "gen_ai.usage.input_tokens": 12,
         "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "Say hi",
         "gen_ai.completion.0.finish_reason": "stop", "gen_ai.completion.0.role": "assistant",
         "gen_ai.completion.0.content": "hi"}
    out = read_model_output(record("openai.chat", a))
    assert out is not None and (out.text, out.prompt, out.requests) == ("hi", "Say hi", ())


# -- Vercel AI SDK -----------------------------------------------------------------------------


def test_ai_sdk_response_attributes() -> None:
    # ai 6.0.326 src/generate-text/generate-text.ts (doGenerate span: ai.response.text,
    # ai.response.reasoning, ai.response.toolCalls = JSON of {toolCallId, toolName, input},
    # ai.prompt.messages = stringifyForTelemetry(promptMessages))
    prompt = [{"role": "system", "content": "You are support."},
              {"role": "user", "content": [{"type": "text", "text": "Refund policy?"}]},
              {"role": "assistant", "content": [{"type": "tool-call", "toolCallId": "c0", "toolName": "s",
                                                 "input": {}}]},
              {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c0", "toolName": "s",
                                            "output": {"type": "json", "value": []}}]}]
    a = {"ai.operationId": "ai.generateText.doGenerate", "ai.response.finishReason": "tool-calls",
         "ai.response.text": "", "ai.response.reasoning": "try the docs",
         "ai.response.toolCalls": json.dumps([{"toolCallId": "call_1", "toolName": "search_docs",
                                               "input": "{\"query\":\"refund\"}"}]),
         "ai.prompt.messages": json.dumps(prompt), "ai.usage.inputTokens": 120, "ai.usage.outputTokens": 20}
    out = read_model_output(record("ai.generateText.doGenerate", a))
    assert out is not None
    assert (out.text, out.reasoning, out.prompt) == (None, "try the docs", "Refund policy?")
    assert out.requests == (ToolRequest("search_docs", {"query": "refund"}, "call_1"),)
    # AI SDK 4 (4.3.19 dist/index.mjs): the tool call's arguments are `args`
    v4 = {"ai.operationId": "ai.streamText.doStream", "ai.response.text": "ok",
          "ai.response.toolCalls": json.dumps([{"toolCallType": "function", "toolCallId": "c9", "toolName": "w",
                                                "args": "{\"x\":1}"}])}
    out = read_model_output(record("ai.streamText.doStream", v4))
    assert out is not None and out.requests == (ToolRequest("w", {"x": 1}, "c9"),) and out.text == "ok"
    # the run's own ai.generateText span is no model call: not read
    assert read_model_output(record("ai.generateText", {"ai.operationId": "ai.generateText",
                                                        "ai.response.text": "final"})) is None


# -- nothing captured, totality, size ----------------------------------------------------------


@pytest.mark.parametrize("attributes", [
    _CHAT,
    {"openinference.span.kind": "LLM", "llm.token_count.prompt": 5, "llm.token_count.completion": 1},
    {"ai.operationId": "ai.generateText.doGenerate", "ai.usage.inputTokens": 5},  # recordOutputs off
    {"llm.request.type": "chat", "gen_ai.usage.prompt_tokens": 3},  # TRACELOOP_TRACE_CONTENT=false
])
def test_a_model_span_without_content_has_no_output(attributes: dict) -> None:
    assert read_model_output(record("chat", attributes)) is None


_ODD = [None, 7, -1, 10**400, math.nan, math.inf, True, b"\xff\xfe", [1, "a", None], {"x": [1]}, "", "[",
        "{\"parts\": 3}", "[1, 2]", [{"role": "assistant", "parts": [None, 3, {"type": 5}, {"type": "tool_call",
                                                                                          "name": ["x"]}]}]]


@pytest.mark.parametrize("odd", _ODD, ids=repr)
def test_readers_are_total(odd: object) -> None:
    keys = ["gen_ai.output.messages", "gen_ai.input.messages", "llm.output_messages.0.message.content",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
            "llm.output_messages.0.message.tool_calls.0.tool_call.id", "llm.input_messages.0.message.role",
            "gen_ai.completion.0.content", "gen_ai.completion.0.role", "gen_ai.completion.0.tool_calls.0.name",
            "gen_ai.completion.0.tool_calls.0.id", "gen_ai.prompt.0.content", "ai.response.text",
            "ai.response.toolCalls", "ai.response.reasoning", "ai.prompt.messages", "events"]
    for key in keys:
        for op in ("chat", "ai.generateText.doGenerate"):
            attrs = {"gen_ai.operation.name": op, "ai.operationId": op, "openinference.span.kind": "LLM", key: odd}
            span = record("chat", attrs, events=[("gen_ai.choice", {"message": odd}), ("gen_ai.user.message",
                                                                                      {"content": odd})])
            for convention in CONVENTIONS:
                convention.read_model_output(span)  # never raises
            out = read_model_output(span)
            assert out is None or isinstance(out.text, (str, type(None)))
    # a request whose name is not a text is no request; an id that is a number is its text
    parts = [{"type": "tool_call", "name": ["x"], "id": "a"}, {"type": "tool_call", "name": "y", "id": 12},
             {"type": "tool_call", "name": "z", "id": 10**5000, "arguments": math.nan}]
    messages = [{"role": "assistant", "parts": parts}]  # (a decoded value, as an in-process span may hold)
    out = read_model_output(record("chat", {**_CHAT, "gen_ai.output.messages": messages}))
    assert out is not None and len(out.requests) == 2
    assert out.requests[0] == ToolRequest("y", NOT_CAPTURED, "12")
    assert (out.requests[1].name, out.requests[1].call_id) == ("z", None)  # a huge number is no id


def test_long_texts_are_capped_but_still_told_apart() -> None:
    def out_of(text: str) -> str | None:
        messages = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}])
        output = read_model_output(record("chat", {**_CHAT, "gen_ai.output.messages": messages}))
        assert output is not None
        return output.text

    head = "x" * (MAX_PART + 100)
    first, second, again = out_of(head + "end one"), out_of(head + "end two"), out_of(head + "end one")
    assert first is not None and len(first) < MAX_PART + 64
    assert first != second and first == again


def test_blob_bytes_never_make_an_output_new() -> None:
    def text_of(payload: str) -> str | None:
        messages = json.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": "Here is the chart."},
            {"type": "blob", "mime_type": "image/png", "modality": "image", "content": payload}]}])
        output = read_model_output(record("chat", {**_CHAT, "gen_ai.output.messages": messages}))
        assert output is not None
        return output.text

    assert text_of(_png(40_000, "A")) == text_of(_png(41_000, "B")) == "Here is the chart.\n<blob image/png ~32KiB>"
    assert text_of(_png(400_000)) != text_of(_png(40_000))  # another order of size is another blob
    # a data URL inside a text part is described too
    messages = json.dumps([{"role": "assistant", "parts": [
        {"type": "text", "content": "see data:image/png;base64," + _png(3000)}]}])
    out = read_model_output(record("chat", {**_CHAT, "gen_ai.output.messages": messages}))
    assert out is not None and out.text == "see <blob image/png ~4KiB>"


# -- the tool call's id ------------------------------------------------------------------------


def test_tool_calls_carry_their_call_id() -> None:
    # GenAI execute_tool: gen_ai.tool.call.id (opentelemetry-util-genai _tool_invocation.py);
    # the AI SDK's ai.toolCall.id (ai 6.0.326 src/generate-text/execute-tool-call.ts)
    genai = record("execute_tool ls", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "ls",
                                       "gen_ai.tool.call.id": "call_Qx1", "gen_ai.tool.call.arguments": "{}"})
    ai = record("ai.toolCall", {"ai.operationId": "ai.toolCall", "ai.toolCall.name": "search_docs",
                                "ai.toolCall.id": "call_1", "ai.toolCall.args": "{}"})
    bare = record("execute_tool ls", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "ls"})
    odd = record("execute_tool ls", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.id": ["x"]})
    assert read_tool_call(genai).call_id == "call_Qx1"
    assert read_tool_call(ai).call_id == "call_1"
    assert read_tool_call(bare).call_id is None
    assert read_tool_call(odd).call_id is None
