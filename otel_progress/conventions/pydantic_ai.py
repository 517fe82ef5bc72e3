"""Pydantic AI's native instrumentation (``Agent.instrument_all()``;
``pydantic_ai/_instrumentation.py`` ``InstrumentationNames.for_version``).

Version 3 and later follow the GenAI conventions (``execute_tool {tool}``,
``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result``, agent span
``invoke_agent {agent}``) and are read by :mod:`.genai`. Version 2 names the tool span
``running tool`` and the agent span ``agent run``, keeps ``gen_ai.operation.name`` and
``gen_ai.tool.name``, and puts the content in ``tool_arguments`` / ``tool_response``; the
agent span's name is in ``agent_name``. (Pydantic AI marks its spans with ``logfire.msg``.)
"""

from __future__ import annotations

from .base import SpanConvention, ToolContent, first_text
from .record import SpanKind, SpanRecord

__all__ = ["PydanticAIConvention"]


class PydanticAIConvention(SpanConvention):
    """Pydantic AI instrumentation version 2 (``tool_arguments`` / ``tool_response``)."""

    name = "pydantic-ai"

    def classify(self, span: SpanRecord) -> SpanKind | None:
        return None  # its spans carry gen_ai.operation.name: the GenAI convention classifies them

    def read_tool(self, span: SpanRecord) -> ToolContent | None:
        a = span.attributes
        if "tool_arguments" not in a and "tool_response" not in a:
            return None
        return ToolContent(first_text(a, "gen_ai.tool.name"), a.get("tool_arguments"), a.get("tool_response"))

    def agent_name(self, span: SpanRecord) -> str | None:
        if "logfire.msg" not in span.attributes:
            return None
        return first_text(span.attributes, "gen_ai.agent.name", "agent_name")
