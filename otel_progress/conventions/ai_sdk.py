"""The Vercel AI SDK's own spans (``ai.*``): what ``generateText`` / ``streamText`` write
with ``experimental_telemetry: { isEnabled: true }`` in AI SDK 4 to 6 (package ``ai``:
read in 6.0.326 ``src/generate-text/execute-tool-call.ts`` and
``src/telemetry/assemble-operation-name.ts``, in 5.0.200 and 4.3.19 ``dist/index.mjs``), and
through the ``LegacyOpenTelemetry`` integration of AI SDK 7 (package ``@ai-sdk/otel``, read
in 1.0.173 ``src/legacy-open-telemetry.ts``).
AI SDK 7's ``OpenTelemetry`` integration writes the GenAI conventions instead
(:mod:`.genai`).

Every span carries ``ai.operationId``, written whatever the recording settings (and
``operation.name`` = the operation id, then the ``functionId`` if one is set;
``ai.telemetry.functionId``):

* ``ai.generateText`` / ``ai.streamText``: one call of the tool loop, the agent run; the
  agent is ``ai.telemetry.functionId`` (``telemetry: { functionId }``). Its ``ai.usage.*``
  are the sum of its steps, never read (the steps are).
* ``ai.generateText.doGenerate`` / ``ai.streamText.doStream`` (and the object and
  embedding calls' ``.doGenerate``, ``.doStream``, ``.doEmbed``): one model call. Tokens
  ``ai.usage.inputTokens`` + ``outputTokens`` (5+), ``ai.usage.promptTokens`` +
  ``completionTokens`` (4), else ``ai.usage.totalTokens`` / ``ai.usage.tokens``; the same
  spans also carry ``gen_ai.usage.*``.
* ``ai.toolCall``: one tool execution. ``ai.toolCall.name``, ``ai.toolCall.id`` (the
  model's call id, new every call: never part of the call, read only for the replay's
  causal order, see below), ``ai.toolCall.args`` =
  ``JSON.stringify(input)``, ``ai.toolCall.result`` = ``JSON.stringify(output)`` (so a
  string result arrives JSON-encoded, ``'"0 results"'``, and is decoded); the AI SDK 5
  betas named them ``ai.toolCall.input`` / ``ai.toolCall.output`` (read in 5.0.0-beta.1
  ``dist/index.mjs``), read when the others are absent. Both are recorded only while
  ``recordOutputs`` is on (the default). A failed tool sets the span
  status ERROR with an ``exception`` event.

Model outputs (:meth:`AISDKConvention.read_model_output`, on the model-call spans, 6.0.326
``src/generate-text/generate-text.ts``, 4.3.19 ``dist/index.mjs``): ``ai.response.text``,
``ai.response.reasoning`` (6: the reasoning parts joined), ``ai.response.toolCalls`` =
``JSON.stringify([{toolCallId, toolName, input}])`` (4: ``args``; ``input`` is the JSON
text of the arguments), all recorded only while ``recordOutputs`` is on; the prompt is the
latest ``user`` message with text in ``ai.prompt.messages`` (``content`` a text or a list
of ``{"type": "text", "text"}`` parts; ``recordInputs``). AI SDK 7's ``OpenTelemetry``
integration writes ``gen_ai.output.messages`` on its ``chat`` spans (the model calls under
each ``agent_step`` span; ``@ai-sdk/otel`` ``src/open-telemetry.ts``
``onLanguageModelCallEnd``), read by :mod:`.genai`.

The JavaScript SDK stamps a span's start in whole milliseconds, so a model call and the
tool calls around it often start in the same millisecond. The call ids order them
(:meth:`AISDKConvention.read_call_links`): a model call's ``ai.response.toolCalls`` name
the calls it requested (each ``toolCallId``), the ``tool-result`` parts of its
``ai.prompt.messages`` the calls whose results it was given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import CallLinks, ModelOutputContent, SpanConvention, ToolContent, as_text, call_ids, decode_json, first_text
from .genai import input_tokens_from, tokens_from
from .openllmetry import json_text
from .outputs import MAX_PARTS, OutputParts, latest_user_text
from .record import SpanKind, SpanRecord

__all__ = ["AISDKConvention"]

OPERATION_ID = "ai.operationId"
TOOL_NAME = "ai.toolCall.name"
FUNCTION_ID = "ai.telemetry.functionId"
TOOL_CALL = "ai.toolCall"
#: The operations that run the tool loop: one agent run each.
AGENT_OPERATIONS = frozenset({"ai.generateText", "ai.streamText"})
#: Suffixes of the operation ids of one model call.
MODEL_SUFFIXES = (".doGenerate", ".doStream", ".doEmbed")
_USAGE_PAIRS = (("ai.usage.inputTokens", "ai.usage.outputTokens"),
                ("ai.usage.promptTokens", "ai.usage.completionTokens"))
_USAGE_TOTALS = ("ai.usage.totalTokens", "ai.usage.tokens")
#: The prompt parts that give a model call a tool's result (``ai.prompt.messages``).
_RESULT_PARTS = frozenset({"tool-result"})


_OUTPUT_KEYS = ("ai.response.text", "ai.response.reasoning", "ai.response.toolCalls")
_PROMPT_KEY = "ai.prompt.messages"


def _operation(span: SpanRecord) -> str | None:
    return as_text(span.attributes.get(OPERATION_ID))


def _user_texts(message: Mapping[str, Any]) -> list[str]:
    """A message's texts in ``ai.prompt.messages``: its ``content`` when it is a text, else
    its ``{"type": "text", "text"}`` parts."""
    content = message.get("content")
    if isinstance(content, str):
        return [content] if content else []
    if isinstance(content, list):
        return [t for t in (as_text(p.get("text")) for p in content[:MAX_PARTS]
                            if isinstance(p, Mapping) and p.get("type") == "text") if t]
    return []


def _prompt(messages: Any) -> str | None:
    """The latest ``user`` message with text in ``ai.prompt.messages``."""
    return latest_user_text(messages, _user_texts)


def model_output(a: Mapping[str, Any]) -> ModelOutputContent | None:
    """The output and prompt of an AI SDK model-call span, or ``None`` without them."""
    prompt = _prompt(a.get(_PROMPT_KEY)) if _PROMPT_KEY in a else None
    if not any(key in a for key in _OUTPUT_KEYS):
        return ModelOutputContent(prompt=prompt) if prompt is not None else None
    out = OutputParts()
    out.text(a.get("ai.response.text"))
    out.thought(a.get("ai.response.reasoning"))
    calls = decode_json(a.get("ai.response.toolCalls"))
    for call in calls[:MAX_PARTS] if isinstance(calls, list) else ():
        if isinstance(call, Mapping):
            out.ask(call.get("toolName"), call.get("input", call.get("args")), call.get("toolCallId"))
    return out.content()._replace(prompt=prompt)


class AISDKConvention(SpanConvention):
    """The Vercel AI SDK's ``ai.*`` spans (``experimental_telemetry``, ``LegacyOpenTelemetry``)."""

    name = "ai_sdk"
    marker_keys = frozenset({OPERATION_ID})
    marker_bytes = (b"ai.operationId",)

    def classify(self, span: SpanRecord) -> SpanKind | None:
        op = _operation(span)
        if op is None:
            return None
        if op == TOOL_CALL:
            return SpanKind.TOOL
        if op in AGENT_OPERATIONS:
            return SpanKind.AGENT
        if op.startswith("ai.") and op.endswith(MODEL_SUFFIXES):
            return SpanKind.MODEL
        return None

    def read_tool(self, span: SpanRecord) -> ToolContent | None:
        if _operation(span) != TOOL_CALL:
            return None
        a = span.attributes
        arguments = a.get("ai.toolCall.args", a.get("ai.toolCall.input"))
        result = a.get("ai.toolCall.result", a.get("ai.toolCall.output"))
        return ToolContent(first_text(a, TOOL_NAME), arguments, None if result is None else json_text(result))

    def read_tokens(self, span: SpanRecord) -> int | None:
        op = _operation(span)
        if op is None or not op.endswith(MODEL_SUFFIXES):
            return None
        return tokens_from(span.attributes, _USAGE_PAIRS, _USAGE_TOTALS)

    def read_input_tokens(self, span: SpanRecord) -> int | None:
        op = _operation(span)
        if op is None or not op.endswith(MODEL_SUFFIXES):
            return None
        return input_tokens_from(span.attributes, tuple(pair[0] for pair in _USAGE_PAIRS))

    def read_call_links(self, span: SpanRecord) -> CallLinks | None:
        op = _operation(span)
        if op == TOOL_CALL:
            return CallLinks(own=first_text(span.attributes, "ai.toolCall.id"))
        if op is None or not op.endswith(MODEL_SUFFIXES):
            return None
        a = span.attributes
        return CallLinks(produced=call_ids(a.get("ai.response.toolCalls"), "toolCallId"),
                         seen=call_ids(a.get("ai.prompt.messages"), "toolCallId", _RESULT_PARTS))

    def read_model_output(self, span: SpanRecord) -> ModelOutputContent | None:
        op = _operation(span)
        if op is None or not op.endswith(MODEL_SUFFIXES):
            return None
        return model_output(span.attributes)

    def agent_name(self, span: SpanRecord) -> str | None:
        if _operation(span) not in AGENT_OPERATIONS:
            return None
        return first_text(span.attributes, FUNCTION_ID)
