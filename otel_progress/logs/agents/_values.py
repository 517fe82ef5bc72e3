"""Total conversions of attribute values as coding agents send them (numbers and booleans
often as strings, JSON inside strings); each answers ``None`` for what it cannot read."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["as_bool", "as_int", "parse_json_object"]

_MAX_INT = 2**53


def as_int(value: Any) -> int | None:
    """An integer from an int, an integral float or a decimal string (``"107"``)."""
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


def as_bool(value: Any) -> bool | None:
    """A boolean from a bool or the strings ``"true"``/``"false"`` (any case)."""
    if type(value) is bool:
        return value
    if type(value) is str:
        text = value.strip().lower()
        if text == "true":
            return True
        if text == "false":
            return False
    return None


def parse_json_object(value: Any) -> dict[str, Any] | None:
    """A JSON object from a map or a JSON text of one (``None``: absent or not an object)."""
    if type(value) is dict:
        return value
    if type(value) is str and value[:1] == "{":
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
        return parsed if type(parsed) is dict else None
    return None
