"""Reading OTLP/JSON trace files: the Collector file exporter's output (one
``ExportTraceServiceRequest`` per line), a single JSON document, or gzip of either.

OTLP/JSON differs from protobuf's default JSON mapping: trace and span ids are hex
strings, enums may be integers, and 64-bit integers are strings. Ids that arrive in
base64 are converted to hex as well. Nothing here raises on a malformed span: what
cannot be read is reported through :class:`ReadProblem` and skipped.

Lines are parsed with orjson; a line orjson refuses is given to the standard library's
``json`` (which accepts what orjson does not: ``NaN``, lone surrogates, UTF-16, numbers
beyond a double), so what is read is what ``json`` alone reads, with one difference: an
integer beyond the 64-bit range written as a JSON number (OTLP cannot carry one: its
integers are 64-bit) reads as the nearest float. The converters take the JSON parser's
plain ``dict`` / ``list`` / ``str`` first and fall back to the general ``Mapping`` checks
for other inputs.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import json
import math
import operator
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

import orjson

from ..conventions import MARKER_KEYS, MARKER_NAME_PREFIXES
from ..conventions.spans import SpanRecord

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "ReadProblem",
    "any_value",
    "encode_any_value",
    "encode_attributes",
    "iter_documents",
    "open_input",
    "spans_from_request",
]

_STATUS_ERROR = (2, "2", "STATUS_CODE_ERROR")
_HEX_DIGITS = "0123456789abcdef"


@dataclass(frozen=True)
class ReadProblem:
    """A part of the input that could not be read: where, and why."""

    source: str
    line: int
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.message}"


def _hex_id(value: Any, size: int) -> tuple[str, bool]:
    """An id as lower-case hex, and whether it is well formed: ``size`` bytes as hex (the
    OTLP/JSON form) or as base64 (protobuf's JSON mapping), not all zero. A malformed id
    is kept as given (lower-cased, at most 64 characters) so that the spans that share it
    still belong together; the caller reports it."""
    if type(value) is str and len(value) == size * 2 and not value.strip(_HEX_DIGITS):
        return value, bool(value.strip("0"))  # the usual form: lower-case hex of the right length
    if value is None or value == "":
        return "", True
    if not isinstance(value, str):
        return _show(value)[:64], False
    if len(value) == size * 2:
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raw = b""
        if len(raw) == size:  # exactly size * 2 hex digits (fromhex skips whitespace)
            return raw.hex(), any(raw)
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return value.lower()[:64], False
    if len(raw) == size:
        return raw.hex(), any(raw)
    return value.lower()[:64], False


def _show(value: Any) -> str:
    """A short printable form of a JSON value, for messages."""
    try:
        text = json.dumps(value, ensure_ascii=True, default=str)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _int(value: Any) -> int:
    if type(value) is str and len(value) <= 40:  # the OTLP/JSON form of a 64-bit integer
        try:
            return int(value)
        except ValueError:
            pass
    elif type(value) is int:
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else 0
    if isinstance(value, int):
        return value
    if isinstance(value, str) and len(value) <= 40:
        try:
            return int(value)
        except ValueError:
            try:
                number = float(value)
            except ValueError:
                return 0
            return int(number) if math.isfinite(number) else 0
    return 0


def _float(value: Any) -> Any:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str) and len(value) <= 40:  # OTLP/JSON writes NaN/Infinity as strings
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _string(value: Any) -> Any:
    if type(value) is str:
        return value
    return value if isinstance(value, str) else (None if value is None else _show(value))


def _bool(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


_ABSENT = object()
_SCALARS = (("stringValue", _string), ("boolValue", _bool), ("intValue", _int), ("doubleValue", _float))
_MAX_DEPTH = 32


def any_value(value: Any, _depth: int = 0) -> Any:
    """Convert an OTLP/JSON ``AnyValue`` to a Python value (maps, lists, scalars).

    Never raises: a value of the wrong JSON type becomes the nearest sensible value (an
    ``intValue`` that is not a whole number 0, a ``stringValue`` that is not a string its
    JSON text, an ``arrayValue`` that is not an array ``[]``), and nesting deeper than 32
    levels is cut off (``None``)."""
    if type(value) is dict:
        text = value.get("stringValue", _ABSENT)  # the usual value (and the first key looked for)
        if text is not _ABSENT:
            return text if type(text) is str else _string(text)
    if not isinstance(value, Mapping):
        return value if value is None or isinstance(value, (str, int, float, bool)) else None
    if _depth > _MAX_DEPTH:
        return None
    for key, conv in _SCALARS:
        if key in value:
            return conv(value[key])
    if "arrayValue" in value:
        arr = value["arrayValue"]
        items = arr.get("values") if isinstance(arr, Mapping) else None
        return [any_value(v, _depth + 1) for v in items] if isinstance(items, list) else []
    if "kvlistValue" in value:
        kv = value["kvlistValue"]
        items = kv.get("values") if isinstance(kv, Mapping) else None
        if not isinstance(items, list):
            return {}
        return {str(item.get("key", "")): any_value(item.get("value"), _depth + 1) for item in items
                if isinstance(item, Mapping)}
    if "bytesValue" in value:
        raw = value["bytesValue"]
        if not isinstance(raw, str):
            return None
        try:
            return base64.b64decode(raw)
        except (binascii.Error, ValueError):
            return raw
    return None


def _attributes(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not isinstance(items, list):
        return out
    for item in items:
        if type(item) is dict:
            key = item.get("key")
            if type(key) is str:
                value = item.get("value")
                if type(value) is dict:  # the usual case, inline: a string value
                    text = value.get("stringValue", _ABSENT)
                    if type(text) is str:
                        out[key] = text
                        continue
                out[key] = any_value(value)
                continue
        if isinstance(item, Mapping) and isinstance(item.get("key"), str):
            out[item["key"]] = any_value(item.get("value"))
    return out


def _is_candidate(name: str, attributes: Any) -> bool:
    """Whether a span with this name and OTLP/JSON attribute list may be a tool, agent or
    model call: :func:`otel_progress.conventions.is_candidate` (a marker key or a marker
    name prefix), decided without converting any attribute value."""
    if name.startswith(MARKER_NAME_PREFIXES):
        return True
    if not isinstance(attributes, list):
        return False
    try:  # the usual list of {"key", "value"} objects, in C
        return not MARKER_KEYS.isdisjoint(map(_KEY, attributes))
    except (KeyError, TypeError, IndexError):  # an item without a key, not an object, or an unhashable key
        pass
    for item in attributes:
        if isinstance(item, Mapping):
            key = item.get("key")
            if isinstance(key, str) and key in MARKER_KEYS:
                return True
    return False


_KEY = operator.itemgetter("key")


def encode_any_value(value: Any) -> dict[str, Any]:
    """A Python value as an OTLP/JSON ``AnyValue`` (64-bit integers as strings, bytes as
    base64, mappings as ``kvlistValue``, lists and tuples as ``arrayValue``, anything else
    as its ``str``): the reverse of :func:`any_value`."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, (bytes, bytearray)):
        return {"bytesValue": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Mapping):
        return {"kvlistValue": {"values": encode_attributes(value)}}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [encode_any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def encode_attributes(attributes: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """A mapping as an OTLP/JSON attribute list (``{"key", "value"}`` objects)."""
    return [{"key": str(k), "value": encode_any_value(v)} for k, v in (attributes or {}).items()]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def spans_from_request(
    request: Any,
    problems: list[ReadProblem] | None = None,
    *,
    source: str = "",
    line: int = 0,
    lean: bool = False,
) -> Iterator[SpanRecord]:
    """The spans of one ``ExportTraceServiceRequest`` (or ``TracesData``) in OTLP/JSON.

    Raises ``ValueError`` when the document is not a trace export at all. Inside one, a
    part of the wrong JSON type is skipped, and a span with a malformed id (not hex or
    base64 of the right length, or all zero) is kept under the id as written; each such
    finding is appended to ``problems`` (if given) as a :class:`ReadProblem` at
    ``source``:``line``.

    ``lean``: a span that no convention can read (no marker key among its attribute keys,
    no marker name prefix: :func:`otel_progress.conventions.is_candidate`) is read without
    its attributes and events, which nothing reads on such a span (it still places its
    children in their runs); its attribute values are never converted."""
    if not isinstance(request, Mapping):
        raise ValueError("not a JSON object")
    resource_spans = request.get("resourceSpans", request.get("resource_spans"))
    if resource_spans is None:
        raise ValueError("no resourceSpans: not an OTLP/JSON trace export")
    if not isinstance(resource_spans, list):
        raise ValueError(f"resourceSpans is {_show(resource_spans)}, not a list")
    for rs in resource_spans:
        if not isinstance(rs, Mapping):
            continue
        resource = rs.get("resource")
        # shared by the resource's spans (read-only): run grouping reads service.instance.id etc.
        resource_attrs = _attributes(resource.get("attributes")) if isinstance(resource, Mapping) else {}
        for ss in _list(rs.get("scopeSpans", rs.get("scope_spans"))):
            if not isinstance(ss, Mapping):
                continue
            for span in _list(ss.get("spans")):
                if not isinstance(span, Mapping):
                    continue
                try:
                    record = _span(span, problems, source, line, resource_attrs, lean)
                except Exception as exc:  # never expected (the readers are total): skip the span, say so
                    if problems is not None:
                        problems.append(ReadProblem(source, line, f"span could not be read ({type(exc).__name__});"
                                                                  " skipped"))
                    continue
                if record is not None:
                    yield record


def _span(span: Mapping[str, Any], problems: list[ReadProblem] | None, source: str, line: int,
          resource: Mapping[str, Any] | None = None, lean: bool = False) -> SpanRecord | None:
    get = span.get
    trace_id, span_id, parent_id = get("traceId"), get("spanId"), get("parentSpanId")
    # the usual ids, inline (lower-case hex of the right length, not all zero); else _hex_id
    if type(trace_id) is str and len(trace_id) == 32 and not trace_id.strip(_HEX_DIGITS) and trace_id.strip("0"):
        trace_ok = True
    else:
        trace_id, trace_ok = _hex_id(trace_id, 16)
    if type(span_id) is str and len(span_id) == 16 and not span_id.strip(_HEX_DIGITS) and span_id.strip("0"):
        span_ok = True
    else:
        span_id, span_ok = _hex_id(span_id, 8)
    if parent_id == "" or parent_id is None:
        parent_id, parent_ok = "", True
    elif type(parent_id) is str and len(parent_id) == 16 and not parent_id.strip(_HEX_DIGITS) and parent_id.strip("0"):
        parent_ok = True
    else:
        parent_id, parent_ok = _hex_id(parent_id, 8)
    if problems is not None and not (trace_ok and span_ok and parent_ok):
        bad = [f"{key} {_show(get(key))}" for key, ok in
               (("traceId", trace_ok), ("spanId", span_ok), ("parentSpanId", parent_ok)) if not ok]
        problems.append(ReadProblem(source, line, f"malformed {', '.join(bad)} (expected hex or base64 of"
                                                  " 16/8 bytes, not all zero); the span is kept under that id"))
    status = get("status")
    if status and (type(status) is dict or isinstance(status, Mapping)):
        message = status.get("message", "")
        message = str(_string(message) or "") if message is not None else ""
        error = _hashable(status.get("code")) in _STATUS_ERROR
    else:  # absent, empty, or not an object
        message, error = "", False
    name = get("name", "")
    name = name if type(name) is str and name else str(_string(name) or "")
    items = get("attributes")
    start, end = get("startTimeUnixNano"), get("endTimeUnixNano")
    try:  # the usual form, inline: decimal strings
        start = int(start) if type(start) is str and len(start) <= 40 else _int(start)
    except ValueError:
        start = _int(start)
    try:
        end = int(end) if type(end) is str and len(end) <= 40 else _int(end)
    except ValueError:
        end = _int(end)
    if resource is None:
        resource = {}
    if lean and not _is_candidate(name, items):
        return SpanRecord(trace_id, span_id, parent_id, name, start, end, {}, error, message, [], resource)
    events = []
    raw_events = get("events")
    if raw_events:
        for ev in _list(raw_events):
            if isinstance(ev, Mapping):
                events.append((str(_string(ev.get("name", "")) or ""), _attributes(ev.get("attributes"))))
    return SpanRecord(trace_id, span_id, parent_id, name, start, end, _attributes(items), error, message, events,
                      resource)


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool)) else None


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


#: The largest document read: a pretty-printed (multi-line) document, or one line.
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024


def _lines(stream: IO[bytes], limit: int) -> Iterator[bytes | int]:
    """The stream's lines; a line longer than ``limit`` is not kept: its length is
    yielded instead (an ``int``), after reading past it in bounded chunks."""
    while True:
        raw = stream.readline(limit + 1)
        if not raw:
            return
        if len(raw) <= limit or raw.endswith(b"\n"):
            yield raw
            continue
        size = len(raw)
        while raw and not raw.endswith(b"\n"):
            raw = stream.readline(1 << 20)
            size += len(raw)
        yield size


def loads(raw: bytes) -> Any:
    """One JSON document: orjson, else the standard library (what orjson refuses and
    ``json`` accepts, with ``json``'s error message for what neither accepts)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def _is_export(raw: bytes) -> Any:
    """The parsed line if it is a whole trace or logs export on its own, else None."""
    text = raw.strip()
    if not text.startswith(b"{") or b"esource" not in text[:64]:
        return None
    try:
        doc = loads(text)
    except (ValueError, RecursionError):
        return None
    keys = ("resourceSpans", "resource_spans", "resourceLogs", "resource_logs")
    return doc if isinstance(doc, Mapping) and any(k in doc for k in keys) else None


def iter_documents(
    stream: IO[bytes],
    source: str,
    *,
    max_document_bytes: int = MAX_DOCUMENT_BYTES,
) -> Iterator[tuple[int, Any] | ReadProblem]:
    """Yield ``(line, document)`` for each JSON document in the stream, or a
    :class:`ReadProblem` for a line that cannot be read.

    The input is line-delimited unless its first line is not JSON on its own: then the
    lines are collected as a possible pretty-printed document, up to
    ``max_document_bytes``. A later line that is a whole trace export on its own shows
    the input is line-delimited after all (with a corrupt first line), and so does
    reaching the limit: the collected lines are reported and reading goes on line by
    line. A line longer than the limit is reported and skipped without being held."""
    first = True
    pending: list[bytes] = []
    pending_bytes = 0
    pending_start = 1
    line_no = 0
    for raw_line in _lines(stream, max_document_bytes):
        line_no += 1
        if isinstance(raw_line, int):
            yield from _flush_pending(pending, source, pending_start)
            pending, pending_bytes, first = [], 0, False
            yield ReadProblem(source, line_no, f"line of {raw_line:,} bytes is longer than the"
                                               f" {_mb(max_document_bytes)} limit; skipped")
            continue
        if pending:
            doc = _is_export(raw_line)
            if doc is not None:  # line-delimited after all: the first lines were corrupt
                yield from _flush_pending(pending, source, pending_start)
                pending, pending_bytes = [], 0
                yield line_no, doc
                continue
            pending.append(raw_line)
            pending_bytes += len(raw_line)
            if pending_bytes > max_document_bytes:
                yield _not_one_document(source, pending_start, line_no, max_document_bytes)
                pending, pending_bytes = [], 0
            continue
        if not raw_line.strip():
            continue
        try:
            doc = loads(raw_line)
        except (ValueError, RecursionError) as exc:
            if first and raw_line.lstrip()[:1] in (b"{", b"["):
                pending.append(raw_line)  # maybe a pretty-printed single document
                pending_bytes = len(raw_line)
                pending_start = line_no
                first = False
                continue
            first = False
            yield ReadProblem(source, line_no, f"not valid JSON ({_short(exc)}); line skipped")
            continue
        first = False
        yield line_no, doc
    if pending:
        yield from _pending_documents(pending, source, pending_start)


def _not_one_document(source: str, start: int, end: int, limit: int) -> ReadProblem:
    """Lines ``start``-``end``, collected as a possible multi-line document, are past the
    limit: they are skipped."""
    return ReadProblem(source, start, f"lines {start}-{end} are not valid JSON line by line, and not one"
                                      f" JSON document within the {_mb(limit)} limit for a"
                                      " multi-line document; skipped")


def _pending_documents(pending: list[bytes], source: str, start: int) -> Iterator[tuple[int, Any] | ReadProblem]:
    """The end of the input, with lines collected since ``start`` as a possible multi-line
    document: its documents (one or several back to back), or the lines reported."""
    docs, failed_at = _concatenated(b"".join(pending))
    if not docs:
        yield from _flush_pending(pending, source, start)
        return
    for offset_line, doc in docs:
        yield start + offset_line, doc
    if failed_at is not None:
        yield ReadProblem(source, start + failed_at, "not valid JSON from here on (after"
                          f" {len(docs)} multi-line document(s)); the rest of the file is skipped")


def _concatenated(data: bytes) -> tuple[list[tuple[int, Any]], int | None]:
    """The JSON documents of ``data``, one or several back to back (``jq . file.jsonl``
    writes pretty-printed documents one after another), each with the line it starts on
    (0-based, relative), and the line where decoding failed (None if all of ``data`` is
    such documents)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return [], 0
    decoder = json.JSONDecoder()
    out: list[tuple[int, Any]] = []
    pos, line = 0, 0
    end = len(text)
    while True:
        start = pos
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        line += text.count("\n", start, pos)
        if pos >= end:
            return out, None
        try:
            doc, stop = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return out, line
        out.append((line, doc))
        line += text.count("\n", pos, stop)
        pos = stop


def _flush_pending(pending: list[bytes], source: str, start: int) -> Iterator[tuple[int, Any] | ReadProblem]:
    """The collected first lines, read line by line (they were not one document)."""
    for i, raw_line in enumerate(pending, start):
        if not raw_line.strip():
            continue
        try:
            yield i, loads(raw_line)
        except (ValueError, RecursionError) as exc:
            yield ReadProblem(source, i, f"not valid JSON ({_short(exc)}); line skipped")


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):g} MiB"


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 80 else text[:77] + "..."
