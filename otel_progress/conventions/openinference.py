"""OpenInference (Arize; ``openinference-semantic-conventions``, module
``openinference.semconv.trace``): ``openinference.span.kind`` in upper case (``TOOL``,
``AGENT``, ``LLM``, ``CHAIN``, ...).

Tool spans: ``tool.name``, arguments in ``input.value`` (JSON of the bound arguments, or
``tool_call.function.arguments``), result in ``output.value``. Results are often a
framework object serialised whole: a LlamaIndex ``ToolOutput`` (which echoes the
arguments) or a Google ADK function response (whose ``id`` changes every call); the
facade reduces those envelopes (:mod:`.envelopes`). A value hidden by the
``OPENINFERENCE_HIDE_*`` settings (``__REDACTED__``) is read as not captured. Agent spans: ``agent.name``, else
``gen_ai.agent.name``, else the span name. Tokens: ``llm.token_count.prompt`` +
``completion``, else ``total``.

Model outputs (``LLM`` spans; ``openinference.semconv.trace`` ``SpanAttributes.LLM_OUTPUT_MESSAGES``,
``MessageAttributes``, ``MessageContentAttributes``, ``ToolCallAttributes``), flattened
with indices: ``llm.output_messages.{i}.message.content`` (text), its
``message.contents.{j}.message_content.type`` / ``.text`` (``text``; ``reasoning``: the
reasoning; ``image``: ``.message_content.image.image.url``, a blob by its descriptor), and
``message.tool_calls.{j}.tool_call.function.name`` / ``.function.arguments`` /
``tool_call.id`` (the requests); the prompt is the latest ``llm.input_messages.{i}`` whose
``message.role`` is ``user`` with a ``message.content`` or text contents. A message whose
role is not ``assistant`` (or unset) is no output of the model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .base import ModelOutputContent, SpanConvention, ToolContent, as_text, decode_json, first_text
from .genai import input_tokens_from, tokens_from
from .outputs import MAX_PARTS, OutputParts, cap_text, joined
from .record import SpanKind, SpanRecord

__all__ = ["OpenInferenceConvention", "flattened", "model_output"]

KIND = "openinference.span.kind"
#: What OpenInference writes in place of a value hidden by ``OPENINFERENCE_HIDE_INPUTS`` /
#: ``OPENINFERENCE_HIDE_OUTPUTS`` (``openinference/instrumentation/config.py``,
#: ``REDACTED_VALUE``): no content, not a value every call shares.
REDACTED = "__REDACTED__"
_KINDS = {"TOOL": SpanKind.TOOL, "AGENT": SpanKind.AGENT, "LLM": SpanKind.MODEL}


_OUTPUT = "llm.output_messages."
_INPUT = "llm.input_messages."
_INDEX = re.compile(r"(\d+)\.(.*)")


def flattened(a: Mapping[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """The flattened messages under ``prefix``: index -> (key after ``{i}.`` -> value)."""
    found: dict[int, dict[str, Any]] = {}
    n = len(prefix)
    for key, value in a.items():
        if not (isinstance(key, str) and key.startswith(prefix)):
            continue
        match = _INDEX.fullmatch(key, n)
        if match is None or len(match.group(1)) > 6:
            continue
        index = int(match.group(1))
        if index in found or len(found) < 4096:
            found.setdefault(index, {})[match.group(2)] = value
    return found


def _nested(fields: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """The items of a list flattened in ``fields`` under ``prefix`` (``message.contents.``),
    in index order."""
    items = flattened(fields, prefix)
    return [items[i] for i in sorted(items)[:MAX_PARTS]]


def _message(out: OutputParts, fields: Mapping[str, Any]) -> None:
    out.text(fields.get("message.content"))
    for item in _nested(fields, "message.contents."):
        kind = item.get("message_content.type")
        if kind == "reasoning":
            out.thought(item.get("message_content.text"))
        elif kind == "image":
            url = as_text(item.get("message_content.image.image.url")) or ""
            out.texts.append(cap_text(url) if url.startswith("data:") else f"<uri image {cap_text(url)}>")
        elif kind in ("text", None):
            out.text(item.get("message_content.text"))
    for call in _nested(fields, "message.tool_calls."):
        out.ask(call.get("tool_call.function.name"), call.get("tool_call.function.arguments"),
                call.get("tool_call.id"))


def _prompt(messages: Mapping[int, Mapping[str, Any]]) -> str | None:
    for index in sorted(messages, reverse=True):
        fields = messages[index]
        if fields.get("message.role") != "user":
            continue
        texts = [t for t in [as_text(fields.get("message.content"))] if t]
        texts += [t for t in (as_text(c.get("message_content.text")) for c in _nested(fields, "message.contents.")
                              if c.get("message_content.type") in ("text", None)) if t]
        if texts:
            return cap_text(joined(texts) or "")
    return None


def model_output(a: Mapping[str, Any]) -> ModelOutputContent | None:
    """The output and prompt of an OpenInference ``LLM`` span's flattened messages."""
    outputs = flattened(a, _OUTPUT)
    inputs = flattened(a, _INPUT)
    if not outputs and not inputs:
        return None
    prompt = _prompt(inputs) if inputs else None
    if not outputs:
        return ModelOutputContent(prompt=prompt)
    out = OutputParts()
    for index in sorted(outputs)[:MAX_PARTS]:
        fields = outputs[index]
        if fields.get("message.role", "assistant") in ("assistant", "model"):
            _message(out, fields)
    if not out.reasoning:
        _raw_reasoning(out, a.get("output.value"))
    return out.content()._replace(prompt=prompt)


_REASONING_TYPES = ("reasoning", "thinking")
_MAX_NODES = 4096


def _raw_reasoning(out: OutputParts, raw: Any) -> None:
    """The reasoning of a response that the flattened messages leave out (the instrumentors
    flatten ``content`` and ``tool_calls`` only), read from ``output.value``, the raw
    response as JSON: an OpenAI-compatible message's ``reasoning_content`` (the OpenAI
    Agents SDK's ``generation`` span) or a content block ``{"type": "reasoning",
    "reasoning": ...}`` / ``{"type": "thinking", "thinking": ...}`` (LangChain's serialised
    ``LLMResult``). Decoded only when the text names reasoning at all."""
    if not isinstance(raw, str) or not any(t in raw for t in _REASONING_TYPES):
        return
    stack = [decode_json(raw)]
    budget = _MAX_NODES
    while stack and budget > 0 and len(out.reasoning) < MAX_PARTS:
        node = stack.pop()
        budget -= 1
        if isinstance(node, Mapping):
            out.thought(node.get("reasoning_content"))
            kind = node.get("type")
            if kind in _REASONING_TYPES:
                out.thought(node.get(kind))
            stack.extend(v for v in reversed(list(node.values())) if isinstance(v, (Mapping, list)))
        elif isinstance(node, list):
            stack.extend(v for v in reversed(node) if isinstance(v, (Mapping, list)))


class OpenInferenceConvention(SpanConvention):
    """OpenInference span kinds and attributes."""

    name = "openinference"
    marker_keys = frozenset({KIND, "llm.token_count.prompt", "llm.token_count.completion", "llm.token_count.total"})
    marker_bytes = (b".span.kind", b"llm.token_count")

    def classify(self, span: SpanRecord) -> SpanKind | None:
        a = span.attributes
        kind = a.get(KIND)
        if isinstance(kind, str):
            found = _KINDS.get(kind.upper())
            if found is not None:
                return found
        if "llm.token_count.prompt" in a or "llm.token_count.total" in a:
            return SpanKind.MODEL
        return None

    def read_tool(self, span: SpanRecord) -> ToolContent | None:
        a = span.attributes
        if not isinstance(a.get(KIND), str):
            return None
        arguments = a.get("input.value")
        if arguments is None:
            arguments = a.get("tool_call.function.arguments")
        result = a.get("output.value")
        return ToolContent(first_text(a, "tool.name", "tool_call.function.name"),
                           None if arguments == REDACTED else arguments, None if result == REDACTED else result)

    def read_tokens(self, span: SpanRecord) -> int | None:
        return tokens_from(span.attributes, (("llm.token_count.prompt", "llm.token_count.completion"),),
                           ("llm.token_count.total",))

    def read_input_tokens(self, span: SpanRecord) -> int | None:
        return input_tokens_from(span.attributes, ("llm.token_count.prompt",))

    def read_model_output(self, span: SpanRecord) -> ModelOutputContent | None:
        a = span.attributes
        if not isinstance(a.get(KIND), str) and "llm.token_count.prompt" not in a:
            return None
        return model_output(a)

    def agent_name(self, span: SpanRecord) -> str | None:
        if not isinstance(span.attributes.get(KIND), str):
            return None
        return first_text(span.attributes, "agent.name", "gen_ai.agent.name") or (
            span.name if isinstance(span.name, str) and span.name else None)
