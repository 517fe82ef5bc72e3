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
"""

from __future__ import annotations

from .base import SpanConvention, ToolContent, first_text
from .genai import input_tokens_from, tokens_from
from .record import SpanKind, SpanRecord

__all__ = ["OpenInferenceConvention"]

KIND = "openinference.span.kind"
#: What OpenInference writes in place of a value hidden by ``OPENINFERENCE_HIDE_INPUTS`` /
#: ``OPENINFERENCE_HIDE_OUTPUTS`` (``openinference/instrumentation/config.py``,
#: ``REDACTED_VALUE``): no content, not a value every call shares.
REDACTED = "__REDACTED__"
_KINDS = {"TOOL": SpanKind.TOOL, "AGENT": SpanKind.AGENT, "LLM": SpanKind.MODEL}


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

    def agent_name(self, span: SpanRecord) -> str | None:
        if not isinstance(span.attributes.get(KIND), str):
            return None
        return first_text(span.attributes, "agent.name", "gen_ai.agent.name") or (
            span.name if isinstance(span.name, str) and span.name else None)
