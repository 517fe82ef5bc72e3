"""Strands Agents' native instrumentation (``strands/telemetry/tracer.py``
``Tracer.start_tool_call_span`` / ``end_tool_call_span``).

Tool spans are GenAI ``execute_tool {tool}`` spans (``gen_ai.tool.name``,
``gen_ai.tool.call.id``) whose content is only in span events:

* by default, a ``gen_ai.tool.message`` event at the start (``role = tool``, ``content`` =
  JSON of the tool input, ``id`` = the tool-use id) and a ``gen_ai.choice`` event at the
  end (``message`` = JSON of the result's content blocks, ``[{"text": ...}]`` or
  ``[{"json": ...}]``, and ``id``);
* with ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``, a
  ``gen_ai.client.inference.operation.details`` event with ``gen_ai.input.messages`` (a
  ``tool_call`` part) and one with ``gen_ai.output.messages`` (a ``tool_call_response``
  part whose ``response`` is the content blocks), read by :mod:`.genai`; this module takes
  the content blocks apart.

A single text block is the text; a single JSON block its value; several blocks stay a list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import SpanConvention, ToolContent, decode_json, event_attributes, first_text
from .genai import OPERATION, GenAIConvention
from .record import SpanRecord

__all__ = ["StrandsConvention", "content_blocks"]

_TOOL_MESSAGE = "gen_ai.tool.message"
_CHOICE = "gen_ai.choice"
_GENAI = GenAIConvention()


def content_blocks(value: Any) -> Any:
    """Strands (Bedrock Converse) content blocks reduced: ``[{"text": t}]`` -> ``t``,
    ``[{"json": v}]`` -> ``v``; anything else as it is."""
    decoded = decode_json(value)
    if isinstance(decoded, list) and len(decoded) == 1 and isinstance(decoded[0], Mapping) and len(decoded[0]) == 1:
        block = decoded[0]
        if "text" in block:
            return block.get("text")
        if "json" in block:
            return block.get("json")
    return value


class StrandsConvention(SpanConvention):
    """Strands tool spans with their content in span events."""

    name = "strands"

    def read_tool(self, span: SpanRecord) -> ToolContent | None:
        a = span.attributes
        if a.get(OPERATION) != "execute_tool" or not span.events:
            return None
        arguments = result = None
        for attrs in event_attributes(span, _TOOL_MESSAGE):
            if attrs.get("role") == "tool" and "content" in attrs:
                arguments = attrs.get("content")
                break
        for attrs in event_attributes(span, _CHOICE):
            if "message" in attrs:
                result = content_blocks(attrs.get("message"))
                break
        if arguments is None and result is None:
            latest = _GENAI.read_tool(span)  # the opt-in: message parts in events
            if latest is None or (latest.arguments is None and latest.result is None):
                return None
            arguments = latest.arguments
            result = None if latest.result is None else content_blocks(latest.result)
        return ToolContent(first_text(a, "gen_ai.tool.name"), arguments, result)
