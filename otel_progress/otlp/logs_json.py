"""OTLP/JSON logs in: ``ExportLogsServiceRequest`` documents to :class:`LogRecordView`.

The Collector file exporter writes one ``ExportLogsServiceRequest`` (``{"resourceLogs":
[...]}``) per line; :func:`records_from_request` reads one such document (or a
``LogsData``). Values are decoded as on the span path (:func:`otel_progress.otlp.files.
any_value`): 64-bit integers written as strings become ints, ids in hex or base64 become
lower-case hex, odd JSON types never raise. A record that cannot be read is reported
through :class:`~otel_progress.otlp.files.ReadProblem` and skipped. The protobuf
counterpart, for the service, is :mod:`otel_progress.otlp.logs_proto`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..conventions.logs.record import LogRecordView
from .files import ReadProblem, _attributes, _hex_id, _int, _show, _string, any_value

__all__ = ["event_name_of", "is_logs_document", "records_from_request"]

_MAX_NAME = 128
_SCALAR_KEYS = ("stringValue", "boolValue", "intValue", "doubleValue")  # looked for before containers


def event_name_of(event_name: Any, attributes: Mapping[str, Any], body: Any) -> str:
    """The record's event name: the OTLP ``event_name`` field (unless it holds a source
    location with spaces, as Codex CLI's does), else the ``event.name`` attribute, else a
    short dotted body such as ``claude_code.tool_result``, else ``""``."""
    if isinstance(event_name, str) and event_name and " " not in event_name and len(event_name) <= _MAX_NAME:
        return event_name
    attribute = attributes.get("event.name")
    if isinstance(attribute, str) and attribute and len(attribute) <= _MAX_NAME:
        return attribute
    if isinstance(body, str) and "." in body and " " not in body and len(body) <= _MAX_NAME:
        return body
    return ""


def is_logs_document(document: Any) -> bool:
    """Whether a parsed JSON document is an OTLP/JSON logs export."""
    return isinstance(document, Mapping) and ("resourceLogs" in document or "resource_logs" in document)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def records_from_request(
    request: Any,
    problems: list[ReadProblem] | None = None,
    *,
    source: str = "",
    line: int = 0,
    start_index: int = 0,
    names: frozenset[str] | None = None,
) -> Iterator[LogRecordView]:
    """The log records of one ``ExportLogsServiceRequest`` (or ``LogsData``) in OTLP/JSON.

    Raises ``ValueError`` when the document is not a logs export at all. Inside one, a part
    of the wrong JSON type is skipped and a record with a malformed id is kept under the id
    as written; each finding is appended to ``problems`` (if given). Records are numbered
    (``index``) from ``start_index`` in document order."""
    if not isinstance(request, Mapping):
        raise ValueError("not a JSON object")
    resource_logs = request.get("resourceLogs", request.get("resource_logs"))
    if resource_logs is None:
        raise ValueError("no resourceLogs: not an OTLP/JSON logs export")
    if not isinstance(resource_logs, list):
        raise ValueError(f"resourceLogs is {_show(resource_logs)}, not a list")
    index = start_index
    for rl in resource_logs:
        if not isinstance(rl, Mapping):
            continue
        resource = rl.get("resource")
        resource_attrs = _attributes(resource.get("attributes")) if isinstance(resource, Mapping) else {}
        for sl in _list(rl.get("scopeLogs", rl.get("scope_logs"))):
            if not isinstance(sl, Mapping):
                continue
            scope = sl.get("scope")
            scope_name = str(_string(scope.get("name", "")) or "") if isinstance(scope, Mapping) else ""
            for record in _list(sl.get("logRecords", sl.get("log_records"))):
                if not isinstance(record, Mapping):
                    continue
                try:
                    view = _record(record, resource_attrs, scope_name, index, problems, source, line, names)
                except Exception as exc:  # never expected (every helper is total): skip, say so
                    if problems is not None:
                        problems.append(ReadProblem(source, line, f"log record could not be read"
                                                                  f" ({type(exc).__name__}); skipped"))
                    continue
                index += 1
                yield view


def _record(record: Mapping[str, Any], resource: Mapping[str, Any], scope: str, index: int,
            problems: list[ReadProblem] | None, source: str, line: int,
            names: frozenset[str] | None = None) -> LogRecordView:
    trace_id, trace_ok = _hex_id(record.get("traceId", record.get("trace_id")), 16)
    span_id, span_ok = _hex_id(record.get("spanId", record.get("span_id")), 8)
    if problems is not None and not (trace_ok and span_ok):
        problems.append(ReadProblem(source, line, "log record with a malformed traceId/spanId (expected hex or"
                                                  " base64 of 16/8 bytes); kept under that id"))
    observed = _int(record.get("observedTimeUnixNano", record.get("observed_time_unix_nano")))
    time_ns = _int(record.get("timeUnixNano", record.get("time_unix_nano")))
    raw_name = record.get("eventName", record.get("event_name"))
    raw_attributes = record.get("attributes")
    if names is not None:
        name = _unread_name(raw_name, raw_attributes, record.get("body"), names)
        if name is not None:  # no reader reads it: its attributes and body are not converted
            return LogRecordView(time_ns=time_ns or observed, observed_ns=observed, event_name=name, resource=resource,
                                 scope=scope, trace_id=trace_id, span_id=span_id,
                                 severity=_int(record.get("severityNumber", record.get("severity_number"))),
                                 index=index)
    attributes = _attributes(raw_attributes)
    body = any_value(record.get("body"))
    return LogRecordView(
        time_ns=time_ns or observed,
        observed_ns=observed,
        event_name=event_name_of(raw_name, attributes, body),
        body=body,
        attributes=attributes,
        resource=resource,
        scope=scope,
        trace_id=trace_id,
        span_id=span_id,
        severity=_int(record.get("severityNumber", record.get("severity_number"))),
        index=index,
    )


def _unread_name(event_name: Any, attributes: Any, body: Any, names: frozenset[str]) -> str | None:
    """The event name of a record no reader reads (neither its event name nor its
    ``event.name`` attribute is in ``names``), else None: read from the JSON without
    converting any other attribute, nor a body that is not a string."""
    attribute = None
    if isinstance(attributes, list):  # the last event.name wins, as in _attributes
        for item in attributes:
            if isinstance(item, Mapping) and item.get("key") == "event.name":
                attribute = any_value(item.get("value"))
    if isinstance(attribute, str) and attribute in names:
        return None
    if isinstance(body, Mapping) and not any(k in body for k in _SCALAR_KEYS) and (
            "arrayValue" in body or "kvlistValue" in body):
        text = None  # a list or a map: never a name (and not converted)
    else:
        text = any_value(body)
    name = event_name_of(event_name, {"event.name": attribute} if attribute is not None else {}, text)
    return None if name in names else name
