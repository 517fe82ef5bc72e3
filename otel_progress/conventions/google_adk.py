"""Google ADK's native instrumentation (``google/adk/telemetry/tracing.py``
``trace_tool_call``).

Tool spans are ``execute_tool {tool}`` with ``gen_ai.operation.name = execute_tool`` set at
the end of the call, ``gen_ai.tool.name`` and ``gen_ai.tool.call.id``. The legacy schema
(the default outside Vertex AI Agent Engine; ``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN``
selects the newer one) puts the content in ADK's own keys:
``gcp.vertex.agent.tool_call_args`` (JSON of the arguments) and
``gcp.vertex.agent.tool_response`` (JSON of the function response; a response that is not
a map is wrapped as ``{"result": ...}``, which is taken off here). Placeholders ADK writes
when it has nothing (``{}`` or ``N/A`` with content capture off, ``<not specified>``) are no
content. The current schema uses the GenAI keys (:mod:`.genai`).

The agent span ``invoke_agent {agent}`` gets its ``gen_ai.operation.name`` only after it
started; :mod:`.genai` recognises it by its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import SpanConvention, ToolContent, decode_json, first_text
from .record import SpanRecord

__all__ = ["GoogleADKConvention"]

ARGS = "gcp.vertex.agent.tool_call_args"
RESPONSE = "gcp.vertex.agent.tool_response"
_PLACEHOLDERS = ("", "{}", "N/A", "<not specified>", '"<not specified>"', '{"result": "<not specified>"}')


def _content(value: Any) -> Any:
    if value is None or (isinstance(value, str) and value.strip() in _PLACEHOLDERS):
        return None
    if isinstance(value, Mapping) and not value:
        return None
    return value


def _unwrap(value: Any) -> Any:
    decoded = decode_json(value) if isinstance(value, str) and value.startswith('{"result"') else value
    if isinstance(decoded, Mapping) and len(decoded) == 1 and "result" in decoded:
        return decoded.get("result")
    return value


class GoogleADKConvention(SpanConvention):
    """ADK's legacy ``gcp.vertex.agent.*`` content keys."""

    name = "google-adk"

    def read_tool(self, span: SpanRecord) -> ToolContent | None:
        a = span.attributes
        if ARGS not in a and RESPONSE not in a:
            return None
        arguments = _content(a.get(ARGS))
        result = _content(a.get(RESPONSE))
        return ToolContent(first_text(a, "gen_ai.tool.name"), arguments, None if result is None else _unwrap(result))
