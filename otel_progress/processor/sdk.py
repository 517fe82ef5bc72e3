"""Adapting the OpenTelemetry Python SDK: what this SDK lets a processor do, and how a
span's fields are read.

The hot paths read an SDK span's own fields (``_context``, ``_parent``, ``_name``,
``_attributes._dict``): a property call or a mapping proxy per field would cost more than
everything else the processor does for a plain span. Every such read has a public
fallback, :func:`public_fields`, taken whenever a field is missing or is not what this
SDK puts there: another processor may have replaced it (OpenInference's span processor
sets ``span._attributes`` to a plain dict in its ``on_end``), a span may come from another
SDK, or a future SDK may lay its spans out differently (the probe at construction
checks the layout once; a span that differs later still takes the fallback).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.trace import StatusCode, get_current_span

from ..conventions.spans import SpanRecord

__all__ = ["NOOP_ON_START", "SHAPE_ERRORS", "Fields", "live_attributes", "local_parent", "on_ending_is_mutable",
           "probe", "public_fields", "record", "scope_name", "span_fields"]

_log = logging.getLogger("otel_progress.processor")

#: What a span's fields are to the processor: ``(trace id, span id, parent, attributes,
#: name)``; ``parent`` is ``None`` or indexable as ``(trace id, span id, is_remote)``.
Fields = tuple[int, int, Any, Mapping[str, Any], str]

#: What reading a field that is missing or of another type raises.
SHAPE_ERRORS = (AttributeError, TypeError, IndexError, KeyError)

_EMPTY: Mapping[str, Any] = MappingProxyType({})

# The ``on_start`` of the exporting processors: it does nothing, so it is not called.
NOOP_ON_START = frozenset({SpanProcessor.on_start, BatchSpanProcessor.on_start, SimpleSpanProcessor.on_start})

_PROBE: tuple[bool, bool] | None = None
_PROBE_LOCK = threading.Lock()


def public_fields(span: Any) -> Fields:
    """A span's fields through its public API only (``context``, ``parent``,
    ``attributes``, ``name``)."""
    ctx = span.context
    p = span.parent
    parent = None if p is None else (p.trace_id, p.span_id, bool(p.is_remote))
    attrs = span.attributes
    return ctx.trace_id, ctx.span_id, parent, attrs if attrs is not None else _EMPTY, span.name or ""


def span_fields(span: Any) -> Fields:
    """A span's fields: the SDK's own, else :func:`public_fields`."""
    try:
        ctx = span._context
        parent = span._parent
        attrs = span._attributes._dict
        if parent is not None:
            parent[2]
        if type(attrs) is not dict:
            raise TypeError
        return ctx[0], ctx[1], parent, attrs, span._name
    except SHAPE_ERRORS:
        return public_fields(span)


def live_attributes(span: Any) -> Mapping[str, Any]:
    """The current attributes of a span that may still be open."""
    try:
        attrs = span._attributes._dict
        if type(attrs) is dict:
            return attrs
    except SHAPE_ERRORS:
        pass
    try:
        attrs = span.attributes
    except Exception:
        return _EMPTY
    return attrs if attrs is not None else _EMPTY


def local_parent(parent_context: Context | None, parent_span_id: int) -> Any:
    """The parent span object, when it is the current span of ``parent_context`` (a
    span started in this process); else None."""
    try:
        parent = get_current_span(parent_context)
        if parent.get_span_context().span_id == parent_span_id:
            return parent
    except Exception:
        pass
    return None


def record(span: ReadableSpan, attrs: Mapping[str, Any]) -> SpanRecord:
    """The convention-neutral record of an ended span (public API)."""
    ctx = span.context
    parent = span.parent
    status = span.status
    events = span.events
    return SpanRecord(
        format(ctx.trace_id, "032x"),
        format(ctx.span_id, "016x"),
        format(parent.span_id, "016x") if parent is not None else "",
        span.name,
        span.start_time or 0,
        span.end_time or 0,
        attrs,
        status.status_code is StatusCode.ERROR,
        status.description or "",
        tuple((e.name, e.attributes or {}) for e in events) if events else (),
        _resource_attributes(span),
    )


def _resource_attributes(span: ReadableSpan) -> Mapping[str, Any]:
    """The span's resource attributes (public ``ReadableSpan.resource``), ``{}`` if absent."""
    try:
        attributes = span.resource.attributes
    except Exception:
        return {}
    return attributes if isinstance(attributes, Mapping) else {}


def on_ending_is_mutable() -> bool:
    """Whether this SDK lets ``SpanProcessor._on_ending`` still modify the span (the fix
    for opentelemetry-python issue #5614). Probed once, with a private provider."""
    return probe()[0]


def probe() -> tuple[bool, bool]:
    """(``_on_ending`` can mutate, the SDK span has the layout the fast paths read)."""
    global _PROBE
    if _PROBE is None:
        with _PROBE_LOCK:
            if _PROBE is None:
                _PROBE = _run_probe()
    return _PROBE


def _run_probe() -> tuple[bool, bool]:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    seen: dict[str, bool] = {}

    def layout(span: Any) -> bool:
        try:
            return (span_fields(span) == (span.context.trace_id, span.context.span_id, span.parent,
                                          span._attributes._dict, span.name)
                    and span._attributes._dict.get("otel_progress.probe") is not None)
        except Exception:
            return False

    class _Probe(SpanProcessor):
        def on_start(self, span: Span, parent_context: Context | None = None) -> None:
            seen["layout"] = layout(span)

        def _on_ending(self, span: Span) -> None:
            try:
                if span.is_recording():
                    span.set_attribute("otel_progress.probe", 2)
                    span.add_event("otel_progress.probe")
            except Exception:
                pass

        def on_end(self, span: ReadableSpan) -> None:
            seen["attr"] = (span.attributes or {}).get("otel_progress.probe") == 2
            seen["event"] = any(e.name == "otel_progress.probe" for e in span.events)
            seen["layout"] = seen.get("layout", False) and layout(span)

    try:
        provider = TracerProvider(sampler=ALWAYS_ON, resource=Resource({}), shutdown_on_exit=False)
        provider.add_span_processor(_Probe())
        provider.get_tracer("otel_progress.probe").start_span(
            "probe", attributes={"otel_progress.probe": 1}).end()
        provider.shutdown()
    except Exception:
        _log.debug("otel-progress: SDK probe failed", exc_info=True)
        return False, False
    return bool(seen.get("attr") and seen.get("event")), bool(seen.get("layout"))


def scope_name(span: Any) -> str:
    """The instrumentation scope name of an SDK span ("" when it has none)."""
    scope = getattr(span, "instrumentation_scope", None)
    return getattr(scope, "name", "") or ""
