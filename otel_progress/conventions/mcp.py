"""Model Context Protocol tool calls.

* The semantic conventions (``model/mcp/spans.yaml``; the MCP Python SDK's server
  middleware ``mcp/server/_otel.py``): ``mcp.method.name = tools/call``, span name
  ``tools/call {tool}``, ``gen_ai.tool.name``, opt-in ``gen_ai.tool.call.arguments`` /
  ``gen_ai.tool.call.result``, ``mcp.session.id``, ``error.type = tool_error`` when the
  result has ``isError``.
* The MCP Python SDK's own request spans (``mcp/shared/session.py``): ``MCP send tools/call
  {tool}`` on the sending side and ``MCP handle tools/call {tool}`` on the receiving side,
  with only ``mcp.method.name`` and ``jsonrpc.request.id``: no content, and the tool name
  only in the span name.
* The stateless 2026-07-28 revision (semantic-conventions-genai ``model/mcp/registry.yaml``,
  changelog ``+.enhancement.md`` / ``+.deprecation.md``): no ``initialize`` and no session, so
  no ``mcp.session.id`` (nothing here needs it; runs are grouped by
  :mod:`.grouping`); ``mcp.protocol.version = 2026-07-28``; the new methods
  ``server/discover``, ``subscriptions/listen`` and
  ``notifications/subscriptions/acknowledged`` are not tool calls (only ``tools/call`` is).
  A Multi Round-Trip Request answers a ``tools/call`` with an ``InputRequiredResult`` and the
  client sends the call again with the input: each round is a call, its result reduced by
  :mod:`.envelopes` (the opaque ``requestState`` taken off).
"""

from __future__ import annotations

from .base import SpanConvention, ToolContent, first_text
from .record import SpanKind, SpanRecord

__all__ = ["MCPConvention"]

METHOD = "mcp.method.name"
_NAME_PREFIXES = ("MCP send tools/call", "MCP handle tools/call", "tools/call ")


def _name_from_span(name: object) -> str | None:
    if not isinstance(name, str):
        return None
    for prefix in _NAME_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):].strip() or None
    return None


class MCPConvention(SpanConvention):
    """MCP ``tools/call`` spans."""

    name = "mcp"
    marker_keys = frozenset({METHOD})
    marker_name_prefixes = _NAME_PREFIXES[:2]
    marker_bytes = (b"tools/call",)  # the required method value, and in both name prefixes

    def classify(self, span: SpanRecord) -> SpanKind | None:
        method = span.attributes.get(METHOD)
        if method == "tools/call":
            return SpanKind.TOOL
        if method is None and _name_from_span(span.name) and not span.name.startswith("tools/call "):
            return SpanKind.TOOL  # an SDK span whose attributes were not (yet) set
        return None

    def read_tool(self, span: SpanRecord) -> ToolContent | None:
        a = span.attributes
        method = a.get(METHOD)
        if method != "tools/call" and not (method is None and isinstance(span.name, str)
                                           and span.name.startswith(_NAME_PREFIXES[:2])):
            return None
        return ToolContent(
            first_text(a, "gen_ai.tool.name") or _name_from_span(span.name),
            a.get("gen_ai.tool.call.arguments"),
            a.get("gen_ai.tool.call.result"),
        )
