"""OTLP protobuf helpers for the service: a slim view of a request, AnyValue conversion,
span records from protobuf spans, annotation building and gRPC status details.

The slim view parses an ``ExportTraceServiceRequest`` down to its spans *as bytes*
(``ResourceSpans`` -> ``ScopeSpans`` -> ``repeated bytes spans``). The GenAI attribute keys
are looked for with C-level substring searches (:func:`marked_spans`), so the ~90% of
spans that are not tool, agent or model calls cost almost nothing; only the others are
parsed fully.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from itertools import accumulate
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from ..conventions import MARKER_BYTES
from ..conventions.spans import SpanRecord

__all__ = [
    "EXPORT_METHOD",
    "MARKERS",
    "ExportTraceServiceRequest",
    "ExportTraceServiceResponse",
    "SlimLogsRequest",
    "SlimRequest",
    "SlimSpan",
    "any_value",
    "attributes_dict",
    "iter_slim_spans",
    "key_values",
    "marked_spans",
    "may_be_genai",
    "resource_attributes",
    "retry_delay_of",
    "retry_info_details",
    "span_record",
    "to_any_value",
]

EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

ExportTraceServiceRequest = trace_service_pb2.ExportTraceServiceRequest
ExportTraceServiceResponse = trace_service_pb2.ExportTraceServiceResponse

#: Byte strings of which at least one occurs in every span :func:`spans.classify` does
#: not call OTHER: the span conventions' marker keys and name prefixes
#: (:data:`otel_progress.conventions.MARKER_BYTES`, the one list the processor's fast path
#: uses too), the common ``gen_ai.`` first. A span without any of them is forwarded
#: without being parsed.
MARKERS: tuple[bytes, ...] = MARKER_BYTES
_RARE_MARKERS = MARKERS[1:]


def may_be_genai(span_bytes: bytes) -> bool:
    """Whether a serialized span may be a tool, agent or model span (no false negatives)."""
    if MARKERS[0] in span_bytes:
        return True
    return any(marker in span_bytes for marker in _RARE_MARKERS)


def marked_spans(spans: Sequence[bytes]) -> list[int]:
    """The indices, ascending, of the serialized spans for which :func:`may_be_genai` is
    true. The common marker (``gen_ai.``) is looked for span by span; the rare ones in one
    concatenation of the spans that lack it (a C-level search per occurrence, none per
    span); an occurrence that straddles two spans does not count."""
    first = MARKERS[0]
    hits = [j for j, span_bytes in enumerate(spans) if first in span_bytes]
    if len(hits) == len(spans):
        return hits
    rest: Sequence[int] = range(len(spans))  # indices without the common marker
    pending = spans
    if hits:
        marked = set(hits)
        rest = [j for j in rest if j not in marked]
        pending = [spans[j] for j in rest]
    joined = b"".join(pending)
    ends = list(accumulate(map(len, pending)))
    found: set[int] = set()
    for marker in MARKERS[1:]:
        found.update(_occurrences(joined, ends, marker))
    if found:
        hits.extend(rest[k] for k in found)
        hits.sort()
    return hits


def _occurrences(joined: bytes, ends: Sequence[int], marker: bytes) -> list[int]:
    """The indices of the spans concatenated in ``joined`` (ending at the offsets
    ``ends``) that contain ``marker``."""
    size = len(marker)
    found: list[int] = []
    pos = joined.find(marker)
    while pos >= 0:
        k = bisect_right(ends, pos)  # the span that holds position pos
        end = ends[k]
        if pos + size <= end:
            found.append(k)
            pos = joined.find(marker, end)
        else:
            pos = joined.find(marker, pos + 1)
    return found


# -- dynamic message types ------------------------------------------------------------

_F = descriptor_pb2.FieldDescriptorProto


def _build_pool() -> descriptor_pool.DescriptorPool:
    fdp = descriptor_pb2.FileDescriptorProto(
        name="otel_progress_service_private.proto", package="otel_progress_private", syntax="proto3"
    )

    def message(name: str, fields: list[tuple[str, int, int, int, str | None]]) -> None:
        msg = fdp.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            f = msg.field.add(name=fname, number=number, type=ftype, label=label)  # type: ignore[arg-type]
            if type_name:
                f.type_name = type_name

    rep, opt = _F.LABEL_REPEATED, _F.LABEL_OPTIONAL
    # ExportTraceServiceRequest -> ResourceSpans -> ScopeSpans -> spans as bytes, every other
    # field kept as bytes too: serialized again, a slim request is the request it was read
    # from, with whatever spans were replaced or added (no span is decoded to get there).
    message("SlimRequest", [("resource_spans", 1, _F.TYPE_MESSAGE, rep, ".otel_progress_private.SlimResourceSpans")])
    message("SlimResourceSpans", [
        ("resource", 1, _F.TYPE_BYTES, opt, None),  # parsed only for batches with GenAI spans
        ("scope_spans", 2, _F.TYPE_MESSAGE, rep, ".otel_progress_private.SlimScopeSpans"),
        ("schema_url", 3, _F.TYPE_BYTES, opt, None),
    ])
    message("SlimScopeSpans", [
        ("scope", 1, _F.TYPE_BYTES, opt, None),
        ("spans", 2, _F.TYPE_BYTES, rep, None),
        ("schema_url", 3, _F.TYPE_BYTES, opt, None),
    ])
    # The same for ExportLogsServiceRequest -> ResourceLogs -> ScopeLogs -> log records.
    message("SlimLogsRequest", [
        ("resource_logs", 1, _F.TYPE_MESSAGE, rep, ".otel_progress_private.SlimResourceLogs")])
    message("SlimResourceLogs", [
        ("resource", 1, _F.TYPE_BYTES, opt, None),
        ("scope_logs", 2, _F.TYPE_MESSAGE, rep, ".otel_progress_private.SlimScopeLogs"),
        ("schema_url", 3, _F.TYPE_BYTES, opt, None),
    ])
    message("SlimScopeLogs", [
        ("scope", 1, _F.TYPE_BYTES, opt, None),
        ("log_records", 2, _F.TYPE_BYTES, rep, None),
        ("schema_url", 3, _F.TYPE_BYTES, opt, None),
    ])
    # A span's ids and name only (for the lineage of spans that are not GenAI calls).
    message("SlimSpan", [
        ("trace_id", 1, _F.TYPE_BYTES, opt, None),
        ("span_id", 2, _F.TYPE_BYTES, opt, None),
        ("parent_span_id", 4, _F.TYPE_BYTES, opt, None),
        ("name", 5, _F.TYPE_BYTES, opt, None),
    ])
    # google.rpc.Status and google.rpc.RetryInfo (wire-compatible copies; no extra dependency).
    message("Duration", [("seconds", 1, _F.TYPE_INT64, opt, None), ("nanos", 2, _F.TYPE_INT32, opt, None)])
    message("RetryInfo", [("retry_delay", 1, _F.TYPE_MESSAGE, opt, ".otel_progress_private.Duration")])
    message("Any", [("type_url", 1, _F.TYPE_STRING, opt, None), ("value", 2, _F.TYPE_BYTES, opt, None)])
    message("Status", [
        ("code", 1, _F.TYPE_INT32, opt, None),
        ("message", 2, _F.TYPE_STRING, opt, None),
        ("details", 3, _F.TYPE_MESSAGE, rep, ".otel_progress_private.Any"),
    ])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return pool


_POOL = _build_pool()


def _cls(name: str) -> Any:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName("otel_progress_private." + name))


SlimRequest: Any = _cls("SlimRequest")
SlimSpan: Any = _cls("SlimSpan")
SlimLogsRequest: Any = _cls("SlimLogsRequest")
_RetryInfo: Any = _cls("RetryInfo")
_Status: Any = _cls("Status")


def iter_slim_spans(slim: Any) -> Iterator[tuple[int, int, int, bytes]]:
    """``(resource index, scope index, span index, span bytes)`` of a parsed SlimRequest."""
    for ri, rs in enumerate(slim.resource_spans):
        for si, ss in enumerate(rs.scope_spans):
            for j, raw in enumerate(ss.spans):
                yield ri, si, j, raw


def retry_info_details(code: int, message: str, retry_after_s: float) -> bytes:
    """A serialized ``google.rpc.Status`` with a ``google.rpc.RetryInfo`` detail, for the
    ``grpc-status-details-bin`` trailer (the Collector honours its delay)."""
    seconds = max(0.0, retry_after_s)
    info = _RetryInfo()
    info.retry_delay.seconds = int(seconds)
    info.retry_delay.nanos = round((seconds - int(seconds)) * 1e9)
    status = _Status(code=code, message=message)
    detail = status.details.add()
    detail.type_url = "type.googleapis.com/google.rpc.RetryInfo"
    detail.value = info.SerializeToString()
    return bytes(status.SerializeToString())


def retry_delay_of(details: bytes | None) -> float | None:
    """The delay of the ``google.rpc.RetryInfo`` in a ``grpc-status-details-bin`` trailer,
    or None when there is none (or it cannot be read)."""
    if not details:
        return None
    try:
        status = _Status.FromString(details)
        for detail in status.details:
            if detail.type_url.endswith("/google.rpc.RetryInfo"):
                info = _RetryInfo.FromString(detail.value)
                return max(0.0, info.retry_delay.seconds + info.retry_delay.nanos / 1e9)
    except Exception:  # a malformed trailer is no RetryInfo
        return None
    return None


# -- values ---------------------------------------------------------------------------


def any_value(value: common_pb2.AnyValue) -> Any:
    """Convert a protobuf ``AnyValue`` to Python (maps for kvlist, lists for arrays)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "string_value":
        return value.string_value
    if which == "bool_value":
        return value.bool_value
    if which == "int_value":
        return value.int_value
    if which == "double_value":
        return value.double_value
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return bytes(value.bytes_value)
    return None  # pragma: no cover - a future oneof member


def attributes_dict(items: Any) -> dict[str, Any]:
    """Repeated ``KeyValue`` -> dict (a later duplicate key wins)."""
    return {kv.key: any_value(kv.value) for kv in items}


def to_any_value(value: Any, depth: int = 0) -> common_pb2.AnyValue:
    """Python value -> ``AnyValue`` (bool before int; maps become kvlists)."""
    if isinstance(value, bool):
        return common_pb2.AnyValue(bool_value=value)
    if isinstance(value, int):
        if -(2**63) <= value < 2**63:
            return common_pb2.AnyValue(int_value=value)
        return common_pb2.AnyValue(string_value=str(value))
    if isinstance(value, float):
        return common_pb2.AnyValue(double_value=value if math.isfinite(value) else 0.0)
    if isinstance(value, str):
        return common_pb2.AnyValue(string_value=value)
    if isinstance(value, (bytes, bytearray)):
        return common_pb2.AnyValue(bytes_value=bytes(value))
    if depth < 8 and isinstance(value, Mapping):
        kv = common_pb2.KeyValueList(values=[
            common_pb2.KeyValue(key=str(k), value=to_any_value(v, depth + 1)) for k, v in value.items()
        ])
        return common_pb2.AnyValue(kvlist_value=kv)
    if depth < 8 and isinstance(value, (list, tuple)):
        arr = common_pb2.ArrayValue(values=[to_any_value(v, depth + 1) for v in value])
        return common_pb2.AnyValue(array_value=arr)
    return common_pb2.AnyValue(string_value=str(value))


def key_values(mapping: Mapping[str, Any]) -> list[common_pb2.KeyValue]:
    """A dict as repeated ``KeyValue``."""
    return [common_pb2.KeyValue(key=k, value=to_any_value(v)) for k, v in mapping.items()]


_STATUS_ERROR = trace_pb2.Status.STATUS_CODE_ERROR


def resource_attributes(resource_bytes: bytes) -> dict[str, Any]:
    """The attributes of a serialized ``Resource`` (``{}`` when absent or unreadable)."""
    if not resource_bytes:
        return {}
    try:
        return attributes_dict(resource_pb2.Resource.FromString(resource_bytes).attributes)
    except Exception:  # a resource we cannot read: the spans are still read without it
        return {}


def span_record(span: trace_pb2.Span, resource: Mapping[str, Any] | None = None) -> SpanRecord:
    """A protobuf span as the engine's convention-neutral :class:`SpanRecord`
    (``resource``: its resource's attributes, for run grouping).

    Raises ``ValueError`` when the ids are not 16 / 8 bytes (an unreadable span)."""
    trace_id = span.trace_id
    span_id = span.span_id
    if len(trace_id) != 16 or len(span_id) != 8:
        raise ValueError(f"bad ids: trace_id {len(trace_id)} bytes, span_id {len(span_id)} bytes")
    parent = span.parent_span_id
    attributes: dict[str, Any] = {}
    for kv in span.attributes:  # attributes_dict, with non-empty strings (most values) inline
        value = kv.value
        text = value.string_value  # "" unless the value is a string
        attributes[kv.key] = text if text else any_value(value)
    if span.HasField("status"):
        status = span.status
        error, message = status.code == _STATUS_ERROR, status.message
    else:
        error, message = False, ""
    events = span.events
    return SpanRecord(
        trace_id.hex(),
        span_id.hex(),
        parent.hex() if len(parent) == 8 and any(parent) else "",
        span.name,
        span.start_time_unix_nano,
        span.end_time_unix_nano,
        attributes,
        error,
        message,
        [(ev.name, attributes_dict(ev.attributes)) for ev in events] if events else [],
        resource if resource is not None else {},
    )
