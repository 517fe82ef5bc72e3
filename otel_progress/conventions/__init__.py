"""Span conventions: one module per instrumentation, behind one small reader interface.

Each convention is a :class:`SpanConvention` (see :mod:`.base`); :data:`CONVENTIONS` lists
them in the order they are asked, the instrumentation-specific ones before the generic
OpenTelemetry GenAI conventions. For every question the first convention that knows the
answer gives it; for a tool call each field (name, arguments, result) comes from the first
convention that found it, and known envelopes are then taken off (:mod:`.envelopes`).

Adding an instrumentation is one module with a :class:`SpanConvention` subclass and one
line in :data:`CONVENTIONS`; if its spans carry none of the existing marker keys, its
``marker_keys`` / ``marker_name_prefixes`` extend :data:`MARKER_KEYS` /
:data:`MARKER_NAME_PREFIXES`, which the processor's and the service's fast paths use to
skip plain spans (one source of truth).

Everything here is total: a convention that raises on some odd value is skipped for that
span (and the answer is what the others say), so nothing reaches the application.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from ..model import ModelOutput
from .ai_sdk import AISDKConvention
from .base import COMPACTED_CONTEXT, COMPACTION, CallLinks, ModelOutputContent, SpanConvention, ToolContent
from .claude_code import ClaudeCodeConvention
from .envelopes import reduce_arguments, reduce_result
from .gemini_cli import GeminiCliConvention
from .genai import GenAIConvention, is_compacted, is_nested, ran, tool_decision
from .google_adk import GoogleADKConvention
from .grouping import GROUP_PREFIX, group_key, is_group_key, own_trace
from .llamaindex import LlamaIndexConvention
from .mcp import MCPConvention
from .openinference import OpenInferenceConvention
from .openllmetry import OpenLLMetryConvention
from .openllmetry_js import OpenLLMetryJSConvention
from .pydantic_ai import PydanticAIConvention
from .record import SpanKind, SpanRecord
from .strands import StrandsConvention

__all__ = [
    "CALL_ID_KEYS",
    "COMPACTED_CONTEXT",
    "COMPACTION",
    "CONVENTIONS",
    "GROUP_PREFIX",
    "MARKER_BYTES",
    "MARKER_KEYS",
    "MARKER_NAME_PREFIXES",
    "CallLinks",
    "ModelOutputContent",
    "SpanConvention",
    "SpanKind",
    "SpanRecord",
    "ToolContent",
    "agent_name",
    "classify",
    "group_key",
    "is_candidate",
    "is_compacted",
    "is_group_key",
    "is_nested",
    "own_trace",
    "read_call_links",
    "read_compaction",
    "read_input_tokens",
    "read_model_content",
    "read_model_output",
    "read_tokens",
    "read_tool",
    "reduce_arguments",
    "reduce_result",
    "tool_call_id",
    "tool_decision",
]

#: The conventions, in the order they are asked.
CONVENTIONS: tuple[SpanConvention, ...] = (
    PydanticAIConvention(),
    StrandsConvention(),
    GoogleADKConvention(),
    LlamaIndexConvention(),
    OpenLLMetryJSConvention(),
    OpenLLMetryConvention(),
    OpenInferenceConvention(),
    AISDKConvention(),
    MCPConvention(),
    ClaudeCodeConvention(),
    GeminiCliConvention(),
    GenAIConvention(),
)

#: Attribute keys of which every span that :func:`classify` does not call OTHER has at
#: least one, unless its name starts with one of :data:`MARKER_NAME_PREFIXES`.
MARKER_KEYS: frozenset[str] = frozenset().union(*(c.marker_keys for c in CONVENTIONS))
#: Span-name prefixes that mark a candidate span without any of :data:`MARKER_KEYS`.
MARKER_NAME_PREFIXES: tuple[str, ...] = tuple(dict.fromkeys(p for c in CONVENTIONS for p in c.marker_name_prefixes))


def _marker_bytes() -> tuple[bytes, ...]:
    """The conventions' ``marker_bytes``, deduplicated, ``gen_ai.`` (the most common) first."""
    out: dict[bytes, None] = {b"gen_ai.": None}
    for convention in CONVENTIONS:
        out.update(dict.fromkeys(convention.marker_bytes))
    return tuple(out)


#: Byte strings of which every serialized span :func:`classify` does not call OTHER contains
#: at least one (the service's search in serialized spans).
MARKER_BYTES: tuple[bytes, ...] = _marker_bytes()


def is_candidate(attributes: Mapping[str, Any], name: Any = "") -> bool:
    """Whether a span with these attributes and name may be a tool, agent or model span
    (no false negatives for :func:`classify`)."""
    return not MARKER_KEYS.isdisjoint(attributes) or (
        isinstance(name, str) and name.startswith(MARKER_NAME_PREFIXES))


def _overrides(method: str) -> tuple[SpanConvention, ...]:
    base = getattr(SpanConvention, method)
    return tuple(c for c in CONVENTIONS if getattr(type(c), method) is not base)


# The GenAI conventions classify first (their ``gen_ai.operation.name`` is decisive where
# present, and most spans use it); the others then, in registry order.
_CLASSIFIERS = tuple(sorted(_overrides("classify"), key=lambda c: not isinstance(c, GenAIConvention)))
_TOOL_READERS = _overrides("read_tool")
_TOKEN_READERS = _overrides("read_tokens")
_INPUT_TOKEN_READERS = _overrides("read_input_tokens")
_AGENT_READERS = _overrides("agent_name")
_COMPACTION_READERS = _overrides("read_compaction")
_LINK_READERS = _overrides("read_call_links")
_OUTPUT_READERS = _overrides("read_model_output")


def classify(span: SpanRecord) -> SpanKind:
    """Tool call, agent invocation, model call, or anything else (the first convention
    that recognises the span decides)."""
    attributes, name = span.attributes, span.name
    if MARKER_KEYS.isdisjoint(attributes) and not (isinstance(name, str) and name.startswith(MARKER_NAME_PREFIXES)):
        return SpanKind.OTHER  # no convention classifies a span without a marker (tested)
    for convention in _CLASSIFIERS:
        try:
            kind = convention.classify(span)
        except Exception:  # a convention's bug on an odd value: ask the others
            continue
        if kind is not None:
            return kind
    return SpanKind.OTHER


def read_tool(span: SpanRecord) -> ToolContent:
    """The tool name, arguments and result of a tool span, each from the first convention
    that found it, with envelopes taken off; fields no convention found are ``None``.
    ``executed`` is ``False`` when a convention says the call never ran, or a
    ``gen_ai.tool.call.decision`` denied it (or awaits approval and there is no result)."""
    name = arguments = result = error_type = error_message = None
    truncated = False
    executed = True
    for convention in _TOOL_READERS:
        try:
            content = convention.read_tool(span)
        except Exception:
            continue
        if content is None:
            continue
        if name is None and content.name:
            name = content.name
        if arguments is None:
            arguments = content.arguments
        if result is None:
            result = content.result
            truncated = truncated or (result is not None and content.truncated)
        if error_type is None and content.error_type:
            error_type, error_message = content.error_type, content.error_message
        executed = executed and content.executed
        if name is not None and arguments is not None and result is not None:
            break
    try:
        if arguments is not None:
            arguments = reduce_arguments(arguments)
        if result is not None:
            result = reduce_result(result)
    except Exception:  # pragma: no cover - the reducers are total; keep the values as read
        pass
    with contextlib.suppress(Exception):  # (ran is total)
        executed = executed and ran(span, result)
    return ToolContent(name, arguments, result, error_type, error_message, truncated, executed)


def read_tokens(span: SpanRecord) -> int:
    """Tokens a model-call span consumed (input + output), 0 if it says nothing."""
    for convention in _TOKEN_READERS:
        try:
            tokens = convention.read_tokens(span)
        except Exception:
            continue
        if tokens is not None:
            return max(0, tokens)
    return 0


def read_input_tokens(span: SpanRecord) -> int:
    """The input tokens of a model-call span (the context the model read), 0 if it says
    nothing."""
    for convention in _INPUT_TOKEN_READERS:
        try:
            tokens = convention.read_input_tokens(span)
        except Exception:
            continue
        if tokens is not None:
            return max(0, tokens)
    return 0


def agent_name(span: SpanRecord) -> str | None:
    """The agent's name (or id) on an agent span: what its convention says, else the
    span name."""
    for convention in _AGENT_READERS:
        try:
            name = convention.agent_name(span)
        except Exception:
            continue
        if name:
            return name
    return span.name if isinstance(span.name, str) and span.name else None


def read_compaction(span: SpanRecord) -> str | None:
    """:data:`COMPACTION` (the span is a compaction of its run's context, e.g. Claude Code's
    summarising ``llm_request``), :data:`COMPACTED_CONTEXT` (it works on a compacted context,
    ``gen_ai.conversation.compacted``) or ``None``: the first convention that knows."""
    for convention in _COMPACTION_READERS:
        try:
            mark = convention.read_compaction(span)
        except Exception:
            continue
        if mark is not None:
            return mark
    return None


def read_call_links(span: SpanRecord) -> CallLinks:
    """The tool-call ids that link the span to others (its own call id on a tool span; the
    calls requested and the results given on a model span): the first convention that
    knows; empty links when none does."""
    for convention in _LINK_READERS:
        try:
            links = convention.read_call_links(span)
        except Exception:
            continue
        if links is not None:
            return links
    return CallLinks()


def read_model_content(span: SpanRecord) -> ModelOutputContent:
    """What a model-call span answered, each field from the first convention that found
    it (fields none found are ``None``)."""
    text = reasoning = requests = prompt = None
    for convention in _OUTPUT_READERS:
        try:
            content = convention.read_model_output(span)
        except Exception:  # a convention's bug on an odd value: ask the others
            continue
        if content is None:
            continue
        text = content.text if text is None else text
        reasoning = content.reasoning if reasoning is None else reasoning
        requests = content.requests if requests is None else requests
        prompt = content.prompt if prompt is None else prompt
        if text is not None and requests is not None and prompt is not None:
            break
    return ModelOutputContent(text, reasoning, requests, prompt)


def read_model_output(span: SpanRecord, *, run_id: str = "", agent: str | None = None,
                      trace_key: str | None = None) -> ModelOutput | None:
    """The engine's :class:`~otel_progress.model.ModelOutput` for a model-call span (its
    text, reasoning, requested tool calls and the latest user message of its input), or
    ``None`` when no convention found any of them (content capture off, or a span of no
    convention). ``trace_key`` replaces the trace id as the engine's trace key."""
    content = read_model_content(span)
    if not content.known:
        return None
    start = _ns(span.start_ns)
    return ModelOutput(trace_id=trace_key or span.trace_id, run_id=run_id, span_id=span.span_id,
                       start_ns=start, end_ns=_ns(span.end_ns) or start, agent=agent, text=content.text,
                       reasoning=content.reasoning, requests=content.requests or (), prompt=content.prompt)


def _ns(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError, OverflowError):
        return 0


#: The keys a tool span's own call id is read from (:meth:`SpanConvention.read_call_links`).
CALL_ID_KEYS = frozenset({"gen_ai.tool.call.id", "ai.toolCall.id"})


def tool_call_id(span: SpanRecord) -> str | None:
    """The call id the model gave a tool span's call (``gen_ai.tool.call.id``, the AI SDK's
    ``ai.toolCall.id``): :func:`read_call_links`' ``own``, asked only when one of
    :data:`CALL_ID_KEYS` is on the span (most tool spans cost one set test)."""
    if CALL_ID_KEYS.isdisjoint(span.attributes):
        return None
    return read_call_links(span).own
