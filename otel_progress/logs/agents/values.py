"""Value helpers the agent readers share (total: they never raise on odd values).

Coding agents write booleans as ``"true"``, numbers as strings, and times as ISO 8601
``event.timestamp`` attributes; these helpers read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ...conventions.base import as_number, as_text
from ..record import LogRecordView

__all__ = ["record_order", "text_attribute", "timestamp_ns", "to_int", "truthy"]


def truthy(value: Any) -> bool | None:
    """A boolean attribute (``True``, ``"true"``, ``"1"``, ...), or ``None`` if it is none."""
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
    if number is None or number < 0 or number > 2**53:
        return 0
    return int(number)


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
