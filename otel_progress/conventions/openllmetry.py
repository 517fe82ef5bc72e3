"""OpenLLMetry / Traceloop (``opentelemetry-semantic-conventions-ai``, module
``opentelemetry.semconv_ai``): ``traceloop.span.kind`` in lower case (``tool``, ``agent``,
``workflow``, ``task``).

Tool spans (``traceloop.span.kind=tool``): the tool is ``traceloop.entity.name`` (also
``gen_ai.tool.name`` on newer versions), the span is named ``{tool}.tool`` or
``execute_tool {tool}``; arguments ``traceloop.entity.input``, result
``traceloop.entity.output``, both ``json.dumps`` of what the instrumentation saw, so a text
result arrives as a JSON string (``'"0 results"'``) and is decoded. The envelopes the
instrumentations put around the call are taken off (:mod:`.envelopes` for the LangChain
callback payload, the serialised ``ToolMessage`` and ``{"args", "kwargs"}``; here the MCP
client's, ``opentelemetry-instrumentation-mcp`` ``instrumentation.py``
``_extract_clean_input`` / ``_extract_clean_output``: ``{"tool_name", "arguments"}`` ->
``arguments``, ``{"result", "is_error"}`` -> ``result``; and its FastMCP server's
``[{"type": "text", "content": ...}]`` -> the text).

Agent spans: ``traceloop.span.kind=agent``, the agent is ``traceloop.entity.name``.

Model outputs in the older flattened keys (OpenLLMetry before it wrote
``gen_ai.output.messages``, read by :mod:`.genai`: ``opentelemetry-instrumentation-openai``
``shared/chat_wrappers.py`` ``_set_completions`` / ``_set_prompts``; the JavaScript SDK's
``LLMSpan.reportResponse`` / ``reportRequest`` in ``@traceloop/node-server-sdk`` 0.27.0
``dist/index.mjs`` writes the same keys): ``gen_ai.completion.{i}.content`` (text; a
completion whose ``role`` is not ``assistant`` or unset is not read),
``gen_ai.completion.{i}.tool_calls.{j}.name`` / ``.arguments`` / ``.id`` and the older
``gen_ai.completion.{i}.function_call.name`` / ``.arguments`` (the requests); the prompt is
the latest ``gen_ai.prompt.{i}.content`` whose ``gen_ai.prompt.{i}.role`` is ``user``
(``gen_ai.prompt.0.user`` for a completion call's prompt).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .base import ModelOutputContent, SpanConvention, ToolContent, as_text, decode_json, first_text
from .openinference import flattened
from .outputs import MAX_PARTS, OutputParts, cap_text
from .record import SpanKind, SpanRecord

__all__ = ["OpenLLMetryConvention", "json_text", "model_output"]

KIND = "traceloop.span.kind"
INPUT = "traceloop.entity.input"
OUTPUT = "traceloop.entity.output"


def json_text(value: Any) -> Any:
    """Decode a value that is a JSON-encoded string (``'"0 results"'``) to its text."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        try:
            decoded = json.loads(value)
        except (ValueError, RecursionError):
            return value
        if isinstance(decoded, str):
            return decoded
    return value


def _mcp_arguments(value: Any, tool: str | None) -> Any:
    decoded = decode_json(value) if isinstance(value, str) and '"tool_name"' in value else value
    if (isinstance(decoded, Mapping) and "arguments" in decoded and decoded.keys() <= {"tool_name", "arguments"}
            and (tool is None or decoded.get("tool_name") in (tool, None))):
        return decoded.get("arguments")
    return value


def _mcp_result(value: Any) -> Any:
    may_be_mcp = isinstance(value, str) and value.startswith(('{"result"', '{"is_error"', '[{"type": "text"'))
    decoded = decode_json(value) if may_be_mcp else value
    if isinstance(decoded, Mapping) and "result" in decoded and decoded.keys() <= {"result", "is_error"}:
        return decoded.get("result")
    if (isinstance(decoded, list) and len(decoded) == 1 and isinstance(decoded[0], Mapping)
            and decoded[0].get("type") == "text" and decoded[0].keys() <= {"type", "content"}):
        return decoded[0].get("content")
    return json_text(value)


def _tool_name(span: SpanRecord) -> str | None:
    name = first_text(span.attributes, "gen_ai.tool.name", "traceloop.entity.name")
    if name:
        return name
    span_name = span.name
    if isinstance(span_name, str) and span_name.endswith(".tool") and len(span_name) > 5:
        return span_name[:-5]
    return None


_COMPLETION = "gen_ai.completion."
_PROMPT = "gen_ai.prompt."


def _completion(out: OutputParts, fields: Mapping[str, Any]) -> None:
    out.text(fields.get("content"))
    calls = flattened(fields, "tool_calls.")
    for j in sorted(calls)[:MAX_PARTS]:
        call = calls[j]
        out.ask(call.get("name"), call.get("arguments"), call.get("id"))
    if "function_call.name" in fields:
        out.ask(fields.get("function_call.name"), fields.get("function_call.arguments"), None)


def _prompt(prompts: Mapping[int, Mapping[str, Any]]) -> str | None:
    for index in sorted(prompts, reverse=True):
        fields = prompts[index]
        text = as_text(fields.get("user"))  # (a completion call: gen_ai.prompt.0.user)
        if not text and fields.get("role") == "user":
            text = as_text(fields.get("content"))
        if text:
            return cap_text(text)
    return None


def model_output(a: Mapping[str, Any]) -> ModelOutputContent | None:
    """The output and prompt of a model span in OpenLLMetry's flattened
    ``gen_ai.completion.{i}.*`` / ``gen_ai.prompt.{i}.*`` keys, or ``None`` without them."""
    completions = flattened(a, _COMPLETION)
    prompts = flattened(a, _PROMPT)
    if not completions and not prompts:
        return None
    prompt = _prompt(prompts) if prompts else None
    if not completions:
        return ModelOutputContent(prompt=prompt)
    out = OutputParts()
    for index in sorted(completions)[:MAX_PARTS]:
        fields = completions[index]
        if fields.get("role", "assistant") == "assistant":
            _completion(out, fields)
    return out.content()._replace(prompt=prompt)


class OpenLLMetryConvention(SpanConvention):
    """Traceloop span kinds and entity attributes."""

    name = "openllmetry"
    marker_keys = frozenset({KIND})
    marker_bytes = (b".span.kind",)

    def classify(self, span: SpanRecord) -> SpanKind | None:
        kind = span.attributes.get(KIND)
        if kind == "tool":
            return SpanKind.TOOL
        if kind == "agent":
            return SpanKind.AGENT
        return None

    def read_tool(self, span: SpanRecord) -> ToolContent | None:
        a = span.attributes
        if a.get(KIND) != "tool":
            return None
        name = _tool_name(span)
        arguments = a.get(INPUT)
        result = a.get(OUTPUT)
        return ToolContent(
            name,
            None if arguments is None else _mcp_arguments(arguments, name),
            None if result is None else _mcp_result(result),
        )

    def read_model_output(self, span: SpanRecord) -> ModelOutputContent | None:
        a = span.attributes
        if "gen_ai.completion.0.content" not in a and "gen_ai.completion.0.role" not in a and (
                "gen_ai.prompt.0.content" not in a and "gen_ai.prompt.0.user" not in a):
            return None  # (the usual case, told without a look at every key)
        return model_output(a)

    def agent_name(self, span: SpanRecord) -> str | None:
        if span.attributes.get(KIND) != "agent":
            return None
        return first_text(span.attributes, "gen_ai.agent.name", "traceloop.entity.name") or as_text(span.name) or None
