"""Reading OTLP/JSON trace files: the Collector file exporter's output (one
``ExportTraceServiceRequest`` per line), a single JSON document, or gzip of either.

OTLP/JSON differs from protobuf's default JSON mapping: trace and span ids are hex
strings, enums may be integers, and 64-bit integers are strings. Ids that arrive in
base64 are converted to hex as well. Nothing here raises on a malformed span: what
cannot be read is reported through :class:`ReadProblem` and skipped.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import json
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

from .spans import SpanRecord

__all__ = ["ReadProblem", "any_value", "iter_documents", "open_input", "spans_from_request"]

_HEX = frozenset("0123456789abcdefABCDEF")
_STATUS_ERROR = (2, "2", "STATUS_CODE_ERROR")


@dataclass(frozen=True)
class ReadProblem:
    """A part of the input that could not be read: where, and why."""

    source: str
    line: int
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.message}"


def _hex_id(value: Any, size: int) -> str:
    if not value or not isinstance(value, str):
        return ""
    if len(value) == size * 2 and set(value) <= _HEX:
        return value.lower()
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return value.lower()
    return raw.hex() if len(raw) == size else value.lower()


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def any_value(value: Any) -> Any:
    """Convert an OTLP/JSON ``AnyValue`` to a Python value (maps, lists, scalars)."""
    if not isinstance(value, Mapping):
        return value
    for key, conv in (
        ("stringValue", None),
        ("boolValue", None),
        ("intValue", _int),
        ("doubleValue", None),
    ):
        if key in value:
            v = value[key]
            return conv(v) if conv else v
    if "arrayValue" in value:
        arr = value["arrayValue"] or {}
        return [any_value(v) for v in arr.get("values", []) or []]
    if "kvlistValue" in value:
        kv = value["kvlistValue"] or {}
        return {str(item.get("key", "")): any_value(item.get("value")) for item in kv.get("values", []) or []
                if isinstance(item, Mapping)}
    if "bytesValue" in value:
        try:
            return base64.b64decode(value["bytesValue"])
        except (binascii.Error, ValueError, TypeError):
            return value["bytesValue"]
    return None


def _attributes(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not isinstance(items, list):
        return out
    for item in items:
        if isinstance(item, Mapping) and isinstance(item.get("key"), str):
            out[item["key"]] = any_value(item.get("value"))
    return out


def spans_from_request(request: Any) -> Iterator[SpanRecord]:
    """The spans of one ``ExportTraceServiceRequest`` (or ``TracesData``) in OTLP/JSON."""
    if not isinstance(request, Mapping):
        raise ValueError("not a JSON object")
    resource_spans = request.get("resourceSpans", request.get("resource_spans"))
    if resource_spans is None:
        raise ValueError("no resourceSpans: not an OTLP/JSON trace export")
    for rs in resource_spans or []:
        if not isinstance(rs, Mapping):
            continue
        for ss in rs.get("scopeSpans", rs.get("scope_spans")) or []:
            if not isinstance(ss, Mapping):
                continue
            for span in ss.get("spans") or []:
                if not isinstance(span, Mapping):
                    continue
                status = span.get("status") or {}
                events = []
                for ev in span.get("events") or []:
                    if isinstance(ev, Mapping):
                        events.append((str(ev.get("name", "")), _attributes(ev.get("attributes"))))
                yield SpanRecord(
                    trace_id=_hex_id(span.get("traceId"), 16),
                    span_id=_hex_id(span.get("spanId"), 8),
                    parent_id=_hex_id(span.get("parentSpanId"), 8),
                    name=str(span.get("name", "")),
                    start_ns=_int(span.get("startTimeUnixNano")),
                    end_ns=_int(span.get("endTimeUnixNano")),
                    attributes=_attributes(span.get("attributes")),
                    error=isinstance(status, Mapping) and status.get("code") in _STATUS_ERROR,
                    status_message=str(status.get("message", "")) if isinstance(status, Mapping) else "",
                    events=events,
                )


def open_input(path: str) -> tuple[IO[bytes], int]:
    """Open a path (``-`` is stdin) for reading bytes, transparently gunzipping;
    returns the stream and its size in bytes when known (for progress), else 0."""
    if path == "-":
        raw: IO[bytes] = sys.stdin.buffer
        size = 0
    else:
        raw = open(path, "rb")  # noqa: SIM115 - returned to the caller
        try:
            size = os.fstat(raw.fileno()).st_size
        except OSError:
            size = 0
    buffered = io.BufferedReader(raw) if not isinstance(raw, io.BufferedReader) else raw
    head = buffered.peek(2)[:2]
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=buffered), size
    return buffered, size


def iter_documents(stream: IO[bytes], source: str) -> Iterator[tuple[int, Any] | ReadProblem]:
    """Yield ``(line, document)`` for each JSON document in the stream, or a
    :class:`ReadProblem` for a line that is not JSON. A file whose first document spans
    several lines is read whole as one document."""
    first = True
    pending: list[bytes] = []
    line_no = 0
    for raw_line in stream:
        line_no += 1
        if pending:
            pending.append(raw_line)
            continue
        if not raw_line.strip():
            continue
        try:
            doc = json.loads(raw_line)
        except (ValueError, RecursionError) as exc:
            if first:
                pending.append(raw_line)  # maybe a pretty-printed single document
                continue
            yield ReadProblem(source, line_no, f"not valid JSON ({_short(exc)}); line skipped")
            continue
        first = False
        yield line_no, doc
    if pending:
        text = b"".join(pending)
        try:
            yield 1, json.loads(text)
        except (ValueError, RecursionError):
            # Not one document either: report line by line so the rest is kept.
            for i, raw_line in enumerate(text.splitlines(), 1):
                if not raw_line.strip():
                    continue
                try:
                    yield i, json.loads(raw_line)
                except (ValueError, RecursionError) as exc:
                    yield ReadProblem(source, i, f"not valid JSON ({_short(exc)}); line skipped")


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 80 else text[:77] + "..."
