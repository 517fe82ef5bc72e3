"""OTLP protobuf logs in: an ``ExportLogsServiceRequest`` message to :class:`LogRecordView`,
for ``otel-progress serve``'s ``LogsService/Export``.

The same view as :mod:`otel_progress.logs.adapters` builds from OTLP/JSON, so one reader
serves both. Nothing here raises on odd content: an ``AnyValue`` of an unset kind is
``None``, nesting deeper than 32 levels is cut off.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .adapters import event_name_of
from .record import LogRecordView

__all__ = ["any_value_proto", "attributes_proto", "records_from_proto"]

_MAX_DEPTH = 32


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
    return {kv.key: any_value_proto(kv.value) for kv in items}


def _cheap_name(record: Any) -> str:
    """The record's event name without decoding its attributes (see ``event_name_of``)."""
    found = {}
    if not record.event_name or " " in record.event_name:
        for kv in record.attributes:
            if kv.key == "event.name":
                found["event.name"] = any_value_proto(kv.value)
    body = record.body.string_value if record.body.WhichOneof("value") == "string_value" else None
    return event_name_of(record.event_name, found, body)


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
                attributes = attributes_proto(record.attributes)
                body = any_value_proto(record.body) if record.HasField("body") else None
                observed = int(record.observed_time_unix_nano)
                yield ri, si, li, LogRecordView(
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
                index += 1
