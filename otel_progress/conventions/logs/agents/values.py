"""Value helpers the agent readers share (total: they never raise on odd values).

Coding agents write booleans as ``"true"``, numbers as strings, JSON inside strings and
times as ISO 8601 ``event.timestamp`` attributes; these helpers read them. Text and
numbers in general are :func:`~otel_progress.conventions.base.as_text` and
:func:`~otel_progress.conventions.base.as_number` (the span conventions' helpers).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import orjson

from ...base import as_number, as_text
from ..record import LogRecordView

__all__ = ["as_bool", "as_int", "parse_json_object", "record_order", "text_attribute", "timestamp_ns", "to_int"]

_MAX_INT = 2**53


def as_bool(value: Any) -> bool | None:
    """A boolean attribute (``True``, ``"true"``, ``"1"``, ``"yes"``, ``"false"``, ``"0"``,
    ``"no"``, any case), or ``None`` if it is none."""
    if isinstance(value, bool):
        return value
    text = as_text(value)
    if text is None:
        return None
    text = text.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    return None


def to_int(value: Any) -> int:
    """A non-negative count (``12``, ``"12"``, ``12.0``), or 0."""
    number = as_number(value)
    if number is None or number < 0 or number > _MAX_INT:
        return 0
    return int(number)


def as_int(value: Any) -> int | None:
    """An integer from an int, an integral float or a decimal string (``"107"``), or
    ``None`` (unlike :func:`to_int`, absent and negative values are told apart)."""
    if type(value) is bool:
        return None
    if type(value) is int:
        return value if -_MAX_INT <= value <= _MAX_INT else None
    if type(value) is float:
        return int(value) if value.is_integer() and abs(value) <= _MAX_INT else None
    if type(value) is str:
        text = value.strip()
        if 0 < len(text) <= 16 and text.lstrip("-").isdigit() and text.isascii():
            return int(text)
    return None


def parse_json_object(value: Any) -> dict[str, Any] | None:
    """A JSON object from a map or a JSON text of one (``None``: absent or not an object;
    :func:`~otel_progress.conventions.base.decode_json` keeps any other value as it is)."""
    if type(value) is dict:
        return value
    if type(value) is str and value[:1] == "{":
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
        return parsed if type(parsed) is dict else None
    return None


def timestamp_ns(value: Any) -> int:
    """An ISO 8601 time with a zone (e.g. ``2026-12-01T10:25:10.980Z``) in Unix ns, or 0."""
    text = as_text(value)
    if not text or len(text) > 64:
        return 0
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return 0
    if moment.tzinfo is None:
        return 0
    try:
        return int(moment.replace(microsecond=0).timestamp()) * 1_000_000_000 + moment.microsecond * 1000
    except (OverflowError, OSError, ValueError):
        return 0


def record_order(record: LogRecordView, *keys: str) -> tuple[int, int, int]:
    """The sort key of a record in its run: the first of ``keys`` (default
    ``event.timestamp``) that holds a time, else the record's time; then the observed
    time and the arrival index."""
    attributes = record.attributes if isinstance(record.attributes, Mapping) else {}
    at = 0
    for key in keys or ("event.timestamp",):
        at = timestamp_ns(attributes.get(key))
        if at:
            break
    return (at or record.time_ns, record.observed_ns, record.index)


def text_attribute(record: LogRecordView, key: str) -> str | None:
    """A text attribute of the record, else of its resource (stripped, at most 256
    characters), or ``None``."""
    for mapping in (record.attributes, record.resource):
        if isinstance(mapping, Mapping):
            text = as_text(mapping.get(key))
            if text and text.strip():
                return text.strip()[:256]
    return None
