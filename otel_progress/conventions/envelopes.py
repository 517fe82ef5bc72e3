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

JSON strings are decoded only when they may hold one of these shapes (a cheap substring
test first), and a value that holds none comes back unchanged, the same object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .base import decode_json

__all__ = ["reduce_arguments", "reduce_result"]

_CALLBACK_KEYS = frozenset({"input_str", "tags", "metadata", "inputs", "kwargs"})
_FUNCTION_RESPONSE_KEYS = frozenset({"id", "name", "response", "will_continue", "scheduling", "parts"})
_TOOL_OUTPUT_KEYS = frozenset({"content", "tool_name", "raw_input", "raw_output", "is_error", "blocks"})
_ARGUMENT_HINTS = ('"input_str"', '"kwargs"')
_RESULT_HINTS = ('"output"', '"ToolMessage"', '"tool_call_id"', '"raw_output"', '"response"', '"kwargs"')
_MAX_DEPTH = 4


def _maybe_decode(value: Any, hints: Sequence[str]) -> Any:
    if isinstance(value, str) and value[:1] in ("{", " ", "\n") and any(h in value for h in hints):
        return decode_json(value)
    return value


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
    decoded = _maybe_decode(value, _ARGUMENT_HINTS)
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


def _reduce_result(value: Any, depth: int) -> Any:
    """The reduced value, or ``None`` when ``value`` is no envelope."""
    if depth > _MAX_DEPTH or not isinstance(value, Mapping):
        return None
    inner: Any = None
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
    decoded = _maybe_decode(value, _RESULT_HINTS)
    reduced = _reduce_result(decoded, 0)
    return value if reduced is None else reduced
