"""OpenLLMetry for JavaScript, LangChain.js / LangGraph.js (``@traceloop/instrumentation-langchain``,
``src/callback_handler.ts``, ``TraceloopCallbackHandler.handleToolStart`` / ``handleToolEnd``;
read at 0.27.0).

Its tool spans are GenAI ``execute_tool`` spans that the Python instrumentation's shape
does not match:

* ``traceloop.span.kind = task`` (not ``tool``), ``traceloop.entity.name`` and the span name
  ``execute_tool {name}`` are the tool's *class* (``tool.id``'s last element: every tool
  made with ``tool()`` is ``DynamicStructuredTool``), and there is no ``gen_ai.tool.name``;
* arguments: ``traceloop.entity.input`` = ``JSON.stringify({args: [input]})``, ``input``
  being the JSON text of the call's arguments;
* result: ``traceloop.entity.output`` = ``JSON.stringify(output)``, the ``ToolMessage``
  serialised (``{"lc": 1, "type": "constructor", "id": [..., "ToolMessage"], "kwargs":
  {"content", "name", "tool_call_id", ...}}``); its ``content`` is the result and its
  ``name`` the tool's real name (one parse for both).

Both are written only while ``traceContent`` is on (the default). Without them the tool is
known only by its class name, and names alone are never compared.

Model outputs: the SDK's own ``LLMSpan`` (``reportRequest`` / ``reportResponse``) writes the
Python instrumentations' flattened ``gen_ai.prompt.{i}.*`` / ``gen_ai.completion.{i}.*``
keys, read by :class:`~otel_progress.conventions.openllmetry.OpenLLMetryConvention` (one
reader for both); its rewrite of the AI SDK's model spans writes ``gen_ai.output.messages`` /
``gen_ai.input.messages``, read by :mod:`.genai`. Nothing is read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import SpanConvention, ToolContent, as_text, decode_json
from .genai import OPERATION
from .record import SpanRecord

__all__ = ["OpenLLMetryJSConvention"]

KIND = "traceloop.span.kind"
INPUT = "traceloop.entity.input"
OUTPUT = "traceloop.entity.output"


def _arguments(value: Any) -> Any:
    """``{"args": [input]}`` -> ``input``; anything else as it is."""
    decoded = decode_json(value) if isinstance(value, str) and value.startswith('{"args"') else value
    if isinstance(decoded, Mapping) and decoded.keys() == {"args"}:
        args = decoded.get("args")
        if isinstance(args, list) and len(args) == 1:
            return args[0]
    return value


def _tool_message(value: Any) -> tuple[str | None, Any]:
    """``(name, content)`` of a serialised ``ToolMessage`` (parsed once, only such a text),
    else ``(None, value)`` for :mod:`.envelopes` to judge."""
    if not isinstance(value, str) or '"ToolMessage"' not in value or not value.startswith('{"lc"'):
        return None, value
    decoded = decode_json(value)
    kwargs = decoded.get("kwargs") if isinstance(decoded, Mapping) else None
    if not isinstance(kwargs, Mapping) or "content" not in kwargs:
        return None, value
    return as_text(kwargs.get("name")), kwargs.get("content")


class OpenLLMetryJSConvention(SpanConvention):
    """OpenLLMetry JS LangChain tool spans (``task`` kind on an ``execute_tool`` span)."""

    name = "openllmetry_js"

    def read_tool(self, span: SpanRecord) -> ToolContent | None:
        a = span.attributes
        if a.get(KIND) != "task" or a.get(OPERATION) != "execute_tool" or "tool.name" in a:
            return None
        arguments, result = a.get(INPUT), a.get(OUTPUT)
        if arguments is None and result is None:
            return None
        name, result = _tool_message(result)
        return ToolContent(name, None if arguments is None else _arguments(arguments), result)
