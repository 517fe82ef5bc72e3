"""Parse what the OpenTelemetry console exporters print: a stream of concatenated JSON
documents, possibly mixed with the application's own output. Shared by the tests that run
real programs under ``opentelemetry-instrument`` (processor, frameworks)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["console_spans", "json_objects"]


def json_objects(text: str) -> list[Any]:
    """Every top-level JSON object in a stream of concatenated JSON documents (what the
    console exporters print)."""
    decoder = json.JSONDecoder()
    out: list[Any] = []
    i = 0
    n = len(text)
    while i < n:
        j = text.find("{", i)
        if j < 0:
            break
        try:
            obj, end = decoder.raw_decode(text, j)
        except ValueError:
            i = j + 1
            continue
        out.append(obj)
        i = end
    return out


def console_spans(text: str) -> list[dict[str, Any]]:
    """The spans the console span exporter printed (``ReadableSpan.to_json()`` objects)."""
    return [o for o in json_objects(text) if isinstance(o, dict) and "context" in o and "name" in o]
