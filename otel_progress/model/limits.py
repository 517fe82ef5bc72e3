"""Size limits of the free text otel-progress exports, applied in one place.

Tool names, agent names and other values taken from the spans are exported as metric
attributes, span event attributes and span attributes; a value of any length would become
a label of that length in every backend. Every exporter of the project (the in-process
processor, ``otel-progress serve`` and ``otel-progress scan``) passes these values
through the functions below, which the :class:`~otel_progress.model.Detection` attribute
builders use:

=======================  ===================  =============================================
what                     limit                applied by
=======================  ===================  =============================================
metric attribute values  256 characters       :func:`metric_value`
event / span attribute   1024 bytes (UTF-8)   :func:`attribute_value` (``progress.tool``,
string values                                 ``progress.poll_tool``, every text figure)
free text (``nudge``,    8192 bytes (UTF-8)   :func:`text_value`
``handoff``) exported
as attributes
=======================  ===================  =============================================

A value over its limit is cut at a character boundary and ends with :data:`ELLIPSIS`, the
whole within the limit. Values within it are returned unchanged (the same object).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ELLIPSIS", "MAX_ATTRIBUTE_BYTES", "MAX_METRIC_CHARS", "MAX_TEXT_BYTES", "attribute_value",
           "clip_bytes", "clip_chars", "metric_value", "text_value"]

#: Metric attribute values (labels), in characters.
MAX_METRIC_CHARS = 256
#: String values of span and event attributes, in UTF-8 bytes.
MAX_ATTRIBUTE_BYTES = 1024
#: Free text exported as an attribute (the nudge and handoff notes), in UTF-8 bytes.
MAX_TEXT_BYTES = 8192
#: What a cut value ends with.
ELLIPSIS = "…"
_ELLIPSIS_BYTES = len(ELLIPSIS.encode())


def clip_chars(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters (cut values end with :data:`ELLIPSIS`)."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 1)] + ELLIPSIS


def clip_bytes(text: str, limit: int) -> str:
    """``text`` within ``limit`` UTF-8 bytes, cut at a character boundary (cut values end
    with :data:`ELLIPSIS`)."""
    if len(text) * 4 <= limit:  # (no character takes more than 4 bytes)
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    cut = data[: max(0, limit - _ELLIPSIS_BYTES)].decode("utf-8", "ignore")
    return cut + ELLIPSIS


def metric_value(value: Any) -> Any:
    """A metric attribute value: strings within :data:`MAX_METRIC_CHARS`."""
    return clip_chars(value, MAX_METRIC_CHARS) if isinstance(value, str) else value


def attribute_value(value: Any) -> Any:
    """A span or event attribute value: strings within :data:`MAX_ATTRIBUTE_BYTES`."""
    return clip_bytes(value, MAX_ATTRIBUTE_BYTES) if isinstance(value, str) else value


def text_value(value: Any) -> Any:
    """Free text exported as an attribute: strings within :data:`MAX_TEXT_BYTES`."""
    return clip_bytes(value, MAX_TEXT_BYTES) if isinstance(value, str) else value
