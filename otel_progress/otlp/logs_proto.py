"""OTLP protobuf logs in: an ``ExportLogsServiceRequest`` to :class:`LogRecordView`, for
``otel-progress serve``'s ``LogsService/Export``.

The same view as :mod:`otel_progress.otlp.logs_json` builds from OTLP/JSON, so one reader
serves both. Nothing here raises on odd content: an ``AnyValue`` of an unset kind is
``None``, nesting deeper than 32 levels is cut off.

The service reads a request slim (:func:`records_from_slim`: resources, scopes and records
stay bytes) and decides from a record's bytes whether it can be of interest: a record
whose bytes contain none of the event names a reader knows (:func:`name_markers`) is never
decoded. :func:`records_from_proto` reads a decoded message the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.resource.v1 import resource_pb2

from ..conventions.logs.record import LogRecordView
from .logs_json import event_name_of

__all__ = ["any_value_proto", "attributes_proto", "name_markers", "records_from_proto", "records_from_slim"]

_MAX_DEPTH = 32
_UNSET: Any = object()


def any_value_proto(value: Any, _depth: int = 0) -> Any:
    """A protobuf ``AnyValue`` as a Python value (maps, lists, scalars, bytes)."""
    if _depth > _MAX_DEPTH:
        return None
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value_proto(v, _depth + 1) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value_proto(kv.value, _depth + 1) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def attributes_proto(items: Any) -> dict[str, Any]:
    """Repeated ``KeyValue`` as a dict (a later duplicate key wins, as in OTLP/JSON)."""
    out: dict[str, Any] = {}
    for kv in items:  # with non-empty strings (most values) inline
        value = kv.value
        text = value.string_value  # "" unless the value is a string
        out[kv.key] = text if text else any_value_proto(value)
    return out


def _cheap_name(record: Any) -> str:
    """The record's event name without decoding its attributes (see ``event_name_of``)."""
    found = {}
    if not record.event_name or " " in record.event_name:
        for kv in record.attributes:
            if kv.key == "event.name":
                found["event.name"] = any_value_proto(kv.value)
    body = record.body.string_value if record.body.WhichOneof("value") == "string_value" else None
    return event_name_of(record.event_name, found, body)


def _view(record: Any, attributes: dict[str, Any], resource: dict[str, Any], scope: str,
          index: int, body: Any = _UNSET) -> LogRecordView:
    if body is _UNSET:
        body = any_value_proto(record.body) if record.HasField("body") else None
    observed = int(record.observed_time_unix_nano)
    return LogRecordView(
        time_ns=int(record.time_unix_nano) or observed,
        observed_ns=observed,
        event_name=event_name_of(record.event_name, attributes, body),
        body=body,
        attributes=attributes,
        resource=resource,
        scope=scope,
        trace_id=record.trace_id.hex() if any(record.trace_id) else "",
        span_id=record.span_id.hex() if any(record.span_id) else "",
        severity=int(record.severity_number),
        index=index,
    )


def name_markers(names: Iterable[str]) -> tuple[bytes, ...]:
    """The fewest byte strings of which every name contains one (the names that contain
    no other name): the serialized form of a record whose event name is one of ``names``
    (in its ``event_name`` field, its ``event.name`` attribute or its body) contains one."""
    encoded = sorted({n.encode("utf-8") for n in names if n}, key=len)
    out: list[bytes] = []
    for name in encoded:
        if not any(m in name for m in out):
            out.append(name)
    return tuple(out)


_LogRecord = logs_pb2.LogRecord.FromString


def records_from_slim(request: Any, names: frozenset[str] | None = None,
                      markers: tuple[bytes, ...] | None = None,
                      ) -> Iterator[tuple[int, int, int, LogRecordView | None]]:
    """``(resource_index, scope_index, record_index, view)`` for the records of a slim
    ``ExportLogsServiceRequest`` (:data:`otel_progress.service.otlp.SlimLogsRequest`), as
    :func:`records_from_proto` gives them for the decoded message (``view.index``: the
    record's position in the request). With ``names``, a record is decoded only when its
    bytes contain one of ``markers`` (default :func:`name_markers` of ``names``), and
    yielded only when its event name is one of ``names``. A record the protobuf runtime
    cannot decode (bad encoding, or values nested past its recursion limit) is yielded with
    ``view`` None. Resources and scopes are decoded once each, for the records yielded; one
    that cannot be decoded reads as empty."""
    if names is not None and markers is None:
        markers = name_markers(names)
    search = re.compile(b"|".join(re.escape(m) for m in markers)).search if markers else None
    index = 0
    for ri, rl in enumerate(request.resource_logs):
        resource: dict[str, Any] | None = None
        for si, sl in enumerate(rl.scope_logs):
            scope: str | None = None
            for li, raw in enumerate(sl.log_records):
                position = index
                index += 1
                if markers is not None and (search is None or search(raw) is None):
                    continue
                try:
                    record = _LogRecord(raw)
                except Exception:  # not decodable: forwarded as it came, counted by the caller
                    yield ri, si, li, None
                    continue
                attributes = attributes_proto(record.attributes)
                body = any_value_proto(record.body) if record.HasField("body") else None
                if names is not None:
                    own = record.event_name  # the name _cheap_name gives, from the decoded values
                    found = ({"event.name": attributes["event.name"]}
                             if (not own or " " in own) and "event.name" in attributes else {})
                    if event_name_of(own, found, body) not in names:
                        continue
                if resource is None:
                    resource = _attributes_of(resource_pb2.Resource.FromString, rl.resource)
                if scope is None:
                    scope = _scope_name(sl.scope)
                yield ri, si, li, _view(record, attributes, resource, scope, position, body)


def _attributes_of(parse: Any, raw: bytes) -> dict[str, Any]:
    try:
        return attributes_proto(parse(raw).attributes) if raw else {}
    except Exception:  # an undecodable resource reads as empty; its records are still read
        return {}


def _scope_name(raw: bytes) -> str:
    try:
        return common_pb2.InstrumentationScope.FromString(raw).name if raw else ""
    except Exception:  # as above
        return ""


def records_from_proto(request: Any, start_index: int = 0,
                       names: frozenset[str] | None = None) -> Iterator[tuple[int, int, int, LogRecordView]]:
    """``(resource_index, scope_index, record_index, view)`` for every record of an
    ``ExportLogsServiceRequest`` (the indices locate the record in the message, for
    annotation); ``view.index`` numbers the records from ``start_index``. With ``names``,
    only records with one of those event names are decoded and yielded (the others are
    numbered all the same)."""
    index = start_index
    for ri, rl in enumerate(request.resource_logs):
        resource: dict[str, Any] | None = None
        for si, sl in enumerate(rl.scope_logs):
            scope = sl.scope.name
            for li, record in enumerate(sl.log_records):
                if names is not None and _cheap_name(record) not in names:
                    index += 1
                    continue
                if resource is None:
                    resource = attributes_proto(rl.resource.attributes)
                yield ri, si, li, _view(record, attributes_proto(record.attributes), resource, scope, index)
                index += 1
