"""Pydantic AI's native instrumentation (``Agent.instrument_all()``;
``pydantic_ai/_instrumentation.py`` ``InstrumentationNames.for_version``).

Version 3 and later follow the GenAI conventions (``execute_tool {tool}``,
``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result``, agent span
``invoke_agent {agent}``) and are read by :mod:`.genai`. Version 2 names the tool span
``running tool`` and the agent span ``agent run``, keeps ``gen_ai.operation.name`` and
``gen_ai.tool.name``, and puts the content in ``tool_arguments`` / ``tool_response``; the
agent span's name is in ``agent_name``. (Pydantic AI marks its spans with ``logfire.msg``.)

Model outputs: versions 2 and later write ``gen_ai.input.messages`` /
``gen_ai.output.messages`` on the model request spans (``pydantic_ai/models/instrumented.py``
``InstrumentationSettings.handle_messages``, read at pydantic-ai-slim 2.68.0), read by
:mod:`.genai` with Pydantic AI's own part types (``thinking``: reasoning; ``binary``: a blob;
a ``tool_call`` with ``builtin: true`` is run by the provider, no request). Version 1
(``event_mode='attributes'``, earlier releases) put the messages in one ``events`` attribute,
a JSON list of event bodies each with its ``event.name``: the ``gen_ai.choice`` events'
``message`` (``{"role", "content", "tool_calls": [{"id", "function": {"name",
"arguments"}}]}``) is the output, the latest ``gen_ai.user.message``'s ``content`` the
prompt; that attribute is read here.
"""

from __future__ import annotations

from collections.abc import Mapping

from .base import ModelOutputContent, SpanConvention, ToolContent, decode_json, first_text
from .genai import choice_message, event_prompt
from .outputs import OutputParts
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

    def read_model_output(self, span: SpanRecord) -> ModelOutputContent | None:
        events = span.attributes.get("events")
        if not isinstance(events, str) or '"gen_ai.' not in events:
            return None
        decoded = decode_json(events)
        if not isinstance(decoded, list):
            return None
        out = OutputParts()
        choices = 0
        prompt = None
        for event in decoded[-4096:]:
            if not isinstance(event, Mapping):
                continue
            name = event.get("event.name")
            if name == "gen_ai.choice":
                choices += 1
                choice_message(out, event.get("message"))
            elif name == "gen_ai.user.message":
                prompt = event_prompt(event.get("content")) or prompt
        if not choices and prompt is None:
            return None
        return out.content(requests_known=choices > 0)._replace(prompt=prompt)

    def agent_name(self, span: SpanRecord) -> str | None:
        if "logfire.msg" not in span.attributes:
            return None
        return first_text(span.attributes, "gen_ai.agent.name", "agent_name")
