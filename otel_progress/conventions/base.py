"""The reader interface every span convention implements, and the value helpers they share.

A convention (one module per instrumentation: OpenTelemetry GenAI, OpenInference,
OpenLLMetry, ...) answers these questions about a :class:`~otel_progress.conventions.spans.SpanRecord`:
what the span is (:meth:`SpanConvention.classify`), which tool call it records
(:meth:`SpanConvention.read_tool`), how many tokens a model call used
(:meth:`SpanConvention.read_tokens`), which agent an agent span runs
(:meth:`SpanConvention.agent_name`), whether it marks a context compaction
(:meth:`SpanConvention.read_compaction`), which tool-call ids link it to other spans
(:meth:`SpanConvention.read_call_links`: the replay's causal order) and what a model call
answered (:meth:`SpanConvention.read_model_output`). Each answers
``None`` for "not mine / not known", so the registry (:mod:`otel_progress.conventions`) can
ask them in order.

Every method must be total: attribute values arrive from other people's code and from the
wire (lists where a string is expected, bytes, maps, huge integers, NaN), and nothing here
may raise on them. The helpers below only ever return ``None`` for a value of the wrong type.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..model import ToolRequest
from .record import SpanKind, SpanRecord

__all__ = [
    "COMPACTED_CONTEXT",
    "COMPACTION",
    "CallLinks",
    "ModelOutputContent",
    "SpanConvention",
    "ToolContent",
    "as_number",
    "as_text",
    "call_ids",
    "decode_json",
    "event_attributes",
    "first_text",
]


#: :meth:`SpanConvention.read_compaction`: the span is a compaction (the summariser's own
#: model call): a boundary of its run.
COMPACTION = "compaction"
#: :meth:`SpanConvention.read_compaction`: the span works on a compacted context
#: (``gen_ai.conversation.compacted = true``): the first such span after one that does not
#: is a boundary of its run.
COMPACTED_CONTEXT = "compacted_context"


class ToolContent(NamedTuple):
    """What a convention read from a tool-call span. ``None``: the convention does not
    know (another convention may); :data:`~otel_progress.model.NOT_CAPTURED` is never
    used here (the facade decides that when no convention knows). (A named tuple: one is
    built per tool span and convention, so it must be cheap.)"""

    name: str | None = None
    arguments: Any = None
    result: Any = None
    #: a failure the result itself reports (a span that ends OK, e.g. a nonzero exit code)
    error_type: str | None = None
    error_message: str | None = None
    #: the result was cut by the producer: a truncated preview, never proof of an equal result
    truncated: bool = False
    #: ``False``: the call never ran (denied or awaiting approval before execution)
    executed: bool = True


class ModelOutputContent(NamedTuple):
    """What a convention read from a model-call span (:meth:`SpanConvention.read_model_output`).
    Each field is ``None`` when the convention does not know it (another convention may):
    ``text`` / ``reasoning`` the output's text and reasoning parts joined; ``requests`` the
    tool calls the model asked for (``()``: it asked for none, known); ``prompt`` the text
    of the latest user message of the input. (A named tuple: cheap.)"""

    text: str | None = None
    reasoning: str | None = None
    requests: tuple[ToolRequest, ...] | None = None
    prompt: str | None = None

    @property
    def known(self) -> bool:
        """Whether any field is known."""
        return (self.text is not None or self.reasoning is not None or self.requests is not None
                or self.prompt is not None)


class CallLinks(NamedTuple):
    """The tool-call ids that link a span to others (:meth:`SpanConvention.read_call_links`):
    a tool span's own call id; the calls a model call requested (``produced``: its response)
    and those whose results it was given (``seen``: its prompt)."""

    own: str | None = None
    produced: frozenset[str] = frozenset()
    seen: frozenset[str] = frozenset()


class SpanConvention:
    """Base class of a span convention: override what the convention defines.

    Attributes:
        name: short name of the convention (for documentation and logs).
        marker_keys: attribute keys of which at least one is on every span this
            convention classifies (the processor's and the service's fast paths reject a
            span with none of the registry's keys without reading it further).
        marker_name_prefixes: span-name prefixes that mark a candidate span when none of
            the keys is present (e.g. the MCP SDK's ``MCP send tools/call``).
        marker_bytes: byte strings at least one of which occurs in the serialized form of
            every span this convention classifies (a key, a key's prefix, or a value the
            convention requires), for searches in serialized spans (the service); as few
            as possible, since each is one more search over a batch.
    """

    name: str = "convention"
    marker_keys: frozenset[str] = frozenset()
    marker_name_prefixes: tuple[str, ...] = ()
    marker_bytes: tuple[bytes, ...] = ()

    def classify(self, span: SpanRecord) -> SpanKind | None:
        """What the span is under this convention, or ``None`` if the convention does not
        recognise it."""
        return None

    def read_tool(self, span: SpanRecord) -> ToolContent | None:
        """The tool name, arguments and result this convention finds on a tool span
        (fields it does not know are ``None``), or ``None``."""
        return None

    def read_tokens(self, span: SpanRecord) -> int | None:
        """Tokens a model-call span consumed (input + output), or ``None``."""
        return None

    def read_input_tokens(self, span: SpanRecord) -> int | None:
        """The input tokens of a model-call span (the context the model read), or ``None``."""
        return None

    def agent_name(self, span: SpanRecord) -> str | None:
        """The agent's name (or id) on an agent span, or ``None``."""
        return None

    def read_compaction(self, span: SpanRecord) -> str | None:
        """:data:`COMPACTION` when the span is a compaction of its run's context,
        :data:`COMPACTED_CONTEXT` when it works on a compacted context, else ``None``."""
        return None

    def read_model_output(self, span: SpanRecord) -> ModelOutputContent | None:
        """What a model-call span answered: its text, reasoning and the tool calls it
        requested, and the latest user message of its input (fields not known are
        ``None``), or ``None`` when the convention finds none of them. Asked for model
        spans only, when they end."""
        return None

    def read_call_links(self, span: SpanRecord) -> CallLinks | None:
        """The tool-call ids of a tool span (its own) or a model span (those it requested,
        those whose results it was given), or ``None``. Asked only where the clock cannot
        order two spans (see :mod:`otel_progress.runs.causal`)."""
        return None


# -- value helpers (total: never raise) -----------------------------------------------


def as_text(value: Any) -> str | None:
    """A string attribute as text: strings as they are, bytes decoded; ``None`` for
    anything else (a list or map where a string was expected is not a name)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return None


def first_text(attributes: Mapping[str, Any], *keys: str) -> str | None:
    """The first non-empty text value among ``keys``."""
    for key in keys:
        text = as_text(attributes.get(key))
        if text:
            return text
    return None


def as_number(value: Any) -> float | None:
    """A finite number, or ``None`` (bools, NaN, infinities, huge or non-numeric values)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:
            return None
        return number if math.isfinite(number) else None
    if isinstance(value, (str, bytes, bytearray)):
        try:
            number = float(value)
        except (ValueError, OverflowError):
            return None
        return number if math.isfinite(number) else None
    return None


_MAX_DECODE = 4 * 1024 * 1024


def call_ids(value: Any, key: str, part_types: frozenset[str] = frozenset(), limit: int = 4096) -> frozenset[str]:
    """The tool-call ids in a JSON value (decoded, or a JSON string): the text value of
    ``key`` of every object in it whose ``type`` is one of ``part_types`` (of every object
    when ``part_types`` is empty). At most ``limit`` nodes are visited."""
    found: set[str] = set()
    stack = [decode_json(value)]
    while stack and limit > 0:
        node = stack.pop()
        limit -= 1
        if isinstance(node, Mapping):
            if not part_types or node.get("type") in part_types:
                text = as_text(node.get(key))
                if text:
                    found.add(text)
            stack.extend(v for v in node.values() if isinstance(v, (Mapping, list)))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, (Mapping, list)))
    return frozenset(found)


def decode_json(value: Any) -> Any:
    """A JSON object or array given as a string, decoded; anything else as it is (also
    a string that is not valid JSON)."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    if not isinstance(value, str) or len(value) > _MAX_DECODE:
        return value
    text = value.lstrip()
    if not text or text[0] not in "{[":
        return value
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return value


def event_attributes(span: SpanRecord, *names: str) -> list[Mapping[str, Any]]:
    """The attribute maps of the span's events with one of these names, in order."""
    out: list[Mapping[str, Any]] = []
    events: Sequence[Any] = span.events or ()
    for event in events:
        try:
            name, attrs = event
        except (TypeError, ValueError):
            continue
        if name in names and isinstance(attrs, Mapping):
            out.append(attrs)
    return out
