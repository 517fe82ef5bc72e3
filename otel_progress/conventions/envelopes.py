"""Envelopes reduced to the real call: what an instrumentation wraps around a tool's
arguments or result, taken off so that two identical calls look identical.

Each shape is recognised by its exact, distinctive keys (a tool whose own output merely has
a ``content`` key is left alone), from the instrumentations' own source:

* OpenLLMetry LangChain/LangGraph (``opentelemetry-instrumentation-langchain``,
  ``callback_handler.py`` ``on_tool_start`` / ``on_tool_end``): arguments
  ``{"input_str", "tags", "metadata", "inputs", "kwargs"}`` (``metadata`` carries
  ``langgraph_step`` and a fresh ``checkpoint_ns`` each call, ``kwargs`` the
  ``tool_call_id``) -> ``inputs`` (else ``input_str``); result ``{"output", "kwargs"}`` ->
  ``output``.
* A LangChain ``ToolMessage``, serialised by ``Serializable.to_json()``
  (``{"lc": 1, "type": "constructor", "id": [..., "ToolMessage"], "kwargs": {...}}``) or
  dumped (``{"content", "type": "tool", "tool_call_id", ...}``) -> its ``content``.
* A LlamaIndex ``ToolOutput`` (``llama_index.core.tools.types``:
  ``content``, ``tool_name``, ``raw_input``, ``raw_output``, ``is_error``), which echoes the
  arguments in ``raw_input`` -> ``raw_output`` (else ``content``).
* A Gemini/ADK function response (``google.genai.types.FunctionResponse``:
  ``{"id", "name", "response", ...}``, the ``id`` new every call) -> ``response``.
* Python call arguments, ``{"args": [...], "kwargs": {...}}`` (Traceloop's ``@tool``
  decorator, OpenLLMetry LlamaIndex's bound arguments) -> ``kwargs`` (or ``args`` when there
  are no keyword arguments).
* MCP results (``mcp.types``): a text content block ``{"type": "text", "text", "annotations",
  "meta"}`` -> its text, a list of them -> the list of texts (the OpenAI Agents SDK,
  ``agents/mcp/util.py`` ``MCPUtil.invoke_mcp_tool``, passes ``model_dump_json()`` of the
  single block on as the tool output); a ``CallToolResult`` (``content``, ``isError``,
  ``structuredContent``, ``meta``, and from the 2026-07-28 revision ``resultType``) -> its
  ``structuredContent``, else its content. An ``InputRequiredResult`` of a Multi Round-Trip
  Request (2026-07-28, SEP-2322: ``resultType = input_required``, ``inputRequests``, an
  opaque ``requestState`` new every round) -> ``{"input_required": inputRequests}``: the
  round asked for input, and the same question asked again is the same result.

JSON strings are decoded only when they may hold one of these shapes (a cheap substring
test first), and a value that holds none comes back unchanged, the same object.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .base import decode_json

__all__ = ["reduce_arguments", "reduce_result"]

_CALLBACK_KEYS = frozenset({"input_str", "tags", "metadata", "inputs", "kwargs"})
_FUNCTION_RESPONSE_KEYS = frozenset({"id", "name", "response", "will_continue", "scheduling", "parts"})
_TOOL_OUTPUT_KEYS = frozenset({"content", "tool_name", "raw_input", "raw_output", "is_error", "blocks"})
_MAX_DEPTH = 4
# A JSON string is decoded only if its first key may start an envelope (in the order the
# instrumentations write them, or sorted) and it holds a key the envelope needs: one
# anchored match and one substring search, never a parse of an ordinary result.
_FIRST_KEY = re.compile(r'\s*\{\s*"([A-Za-z_]{1,16})"')
_SPACE_OR_BRACE = frozenset("{ \t\r\n")
_ARGUMENT_NEEDS: Mapping[str, tuple[str, ...]] = {
    "input_str": ('"inputs"',), "inputs": ('"input_str"',), "metadata": ('"input_str"',),
    "kwargs": ('"input_str"', '"args"'), "tags": ('"input_str"',), "args": ('"kwargs"',),
}
_RESULT_NEEDS: Mapping[str, tuple[str, ...]] = {
    "output": ('"output"',), "lc": ('"ToolMessage"',), "id": ('"ToolMessage"', '"response"'),
    "content": ('"tool_call_id"', '"raw_output"', '"isError"', '"structuredContent"'),
    "blocks": ('"raw_output"',),
    "tool_name": ('"raw_output"',), "name": ('"response"',), "will_continue": ('"response"',),
    "scheduling": ('"response"',), "parts": ('"response"',), "response": ('"name"',),
    "is_error": ('"raw_output"',), "raw_input": ('"raw_output"',), "additional_kwargs": ('"tool_call_id"',),
    "type": ('"tool_call_id"', '"text"'), "text": ('"type"',), "annotations": ('"text"',),
    "isError": ('"content"',), "structuredContent": ('"content"',), "meta": ('"content"',),
    "_meta": ('"content"',), "resultType": ('"content"', '"input_required"'),
    "inputRequests": ('"input_required"',), "requestState": ('"input_required"',),
}
_TEXT_BLOCK_KEYS = frozenset({"type", "text", "annotations", "meta", "_meta"})
_CALL_TOOL_RESULT_KEYS = frozenset({"content", "isError", "structuredContent", "meta", "_meta", "resultType"})
_INPUT_REQUIRED_KEYS = frozenset({"resultType", "inputRequests", "requestState", "meta", "_meta"})


def _first_key(value: str) -> str | None:
    if value.startswith('[{"type": "text"') or value.startswith('[{"type":"text"'):
        return "text"  # a list of MCP text blocks
    if value.startswith('{"'):  # json.dumps output: no space before the first key
        end = value.find('"', 2, 20)
        return value[2:end] if end > 2 else None
    match = _FIRST_KEY.match(value, 0, 64) if value[:1] in _SPACE_OR_BRACE else None
    return match.group(1) if match is not None else None


def _maybe_decode(value: Any, needs: Mapping[str, Sequence[str]]) -> Any:
    if not isinstance(value, str):
        return value
    key = _first_key(value)
    wanted = needs.get(key) if key is not None else None
    if wanted is None or not any(w in value for w in wanted):
        return value
    return decode_json(value)


def _args_kwargs(value: Mapping[str, Any]) -> Any:
    if len(value) == 2 and "args" in value and "kwargs" in value:
        args, kwargs = value.get("args"), value.get("kwargs")
        if isinstance(kwargs, Mapping) and isinstance(args, (list, tuple)):
            if not args:
                return kwargs
            if not kwargs:
                return list(args)
    return None


def _reduce_arguments(value: Any, depth: int) -> Any:
    if depth > _MAX_DEPTH or not isinstance(value, Mapping):
        return None
    if "input_str" in value and value.keys() <= _CALLBACK_KEYS:
        inputs = value.get("inputs")
        if inputs is not None and inputs != {}:
            return inputs
        text = value.get("input_str")
        return decode_json(text) if isinstance(text, str) else text
    return _args_kwargs(value)


def reduce_arguments(value: Any) -> Any:
    """The call's real arguments inside a known envelope; ``value`` itself otherwise."""
    decoded = _maybe_decode(value, _ARGUMENT_NEEDS)
    reduced = _reduce_arguments(decoded, 0)
    return value if reduced is None else reduced


def _tool_message_content(value: Mapping[str, Any]) -> Any:
    ident = value.get("id")
    if (value.get("lc") == 1 and value.get("type") == "constructor" and isinstance(ident, list)
            and ident and ident[-1] == "ToolMessage"):
        kwargs = value.get("kwargs")
        if isinstance(kwargs, Mapping) and "content" in kwargs:
            return kwargs.get("content")
    if value.get("type") == "tool" and "content" in value and "tool_call_id" in value:
        return value.get("content")
    return None


def _text_block(value: Any) -> str | None:
    if (isinstance(value, Mapping) and value.get("type") == "text" and isinstance(value.get("text"), str)
            and value.keys() <= _TEXT_BLOCK_KEYS):
        return value.get("text")
    return None


def _text_blocks(value: Any) -> Any:
    """A list of MCP text blocks -> their texts (one block: its text); else ``None``."""
    if not isinstance(value, list) or not value or len(value) > 256:
        return None
    texts = [_text_block(block) for block in value]
    if any(text is None for text in texts):
        return None
    return texts[0] if len(texts) == 1 else texts


def _reduce_result(value: Any, depth: int) -> Any:
    """The reduced value, or ``None`` when ``value`` is no envelope."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(value, list):
        return _text_blocks(value)
    if not isinstance(value, Mapping):
        return None
    inner: Any = _text_block(value)
    if inner is not None:
        return inner
    if value.get("resultType") == "input_required" and value.keys() <= _INPUT_REQUIRED_KEYS:
        return {"input_required": value.get("inputRequests")}
    if ("content" in value and ("isError" in value or "structuredContent" in value)
            and value.keys() <= _CALL_TOOL_RESULT_KEYS):
        structured = value.get("structuredContent")
        if structured is not None:
            return structured
        content = value.get("content")
        return _text_blocks(content) if _text_blocks(content) is not None else content
    if "output" in value and value.keys() <= {"output", "kwargs"}:
        inner = value.get("output")
        inner = decode_json(inner) if isinstance(inner, str) else inner
    if inner is None:
        inner = _tool_message_content(value)
    if inner is None and "raw_output" in value and "raw_input" in value and value.keys() <= _TOOL_OUTPUT_KEYS:
        inner = value.get("raw_output")
        if inner is None:
            inner = value.get("content")
    if (inner is None and "response" in value and "name" in value
            and value.keys() <= _FUNCTION_RESPONSE_KEYS):
        inner = value.get("response")
    if inner is None:
        return None
    deeper = _reduce_result(inner, depth + 1)
    return inner if deeper is None else deeper


def reduce_result(value: Any) -> Any:
    """The tool's real output inside a known envelope; ``value`` itself otherwise."""
    decoded = _maybe_decode(value, _RESULT_NEEDS)
    reduced = _reduce_result(decoded, 0)
    return value if reduced is None else reduced
