"""A convention-neutral view of one OpenTelemetry log record.

Adapters convert what they read (an OTLP/JSON ``ExportLogsServiceRequest`` line, an OTLP
protobuf request in the service) into :class:`LogRecordView`; the readers of
:mod:`otel_progress.conventions.logs` only ever see this view, so one reader serves ``scan`` and
``serve`` alike. It is the log-side counterpart of
:class:`~otel_progress.conventions.spans.SpanRecord`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LogRecordView"]


@dataclass(slots=True)
class LogRecordView:
    """One log record, decoded. Ids are lower-case hex strings (``""`` when absent).

    Attributes:
        time_ns: the record's ``timeUnixNano``, or its ``observedTimeUnixNano`` when the
            producer left the time at 0 (Codex CLI does).
        observed_ns: ``observedTimeUnixNano`` (0 when absent).
        event_name: the record's OTLP ``event_name`` field when it is a name (no
            whitespace: Codex CLI 0.171 writes a source location such as
            ``event otel/src/tool_result.rs:54`` there); else its ``event.name``
            attribute; else the body, when the body is a short dotted name such as
            ``claude_code.tool_result``; else ``""``.
        body: the decoded body (``AnyValue``: a string, number, bool, list, map or None).
        attributes: the record's attributes, decoded (ints stay ints, bools bools).
        resource: the attributes of the record's resource.
        scope: the instrumentation scope's name.
        trace_id, span_id: the record's trace context, if any.
        severity: ``severityNumber`` (0: unspecified).
        index: the record's position in its input (arrival order), to keep order stable
            where the producer's own order key is missing or equal.
    """

    time_ns: int = 0
    observed_ns: int = 0
    event_name: str = ""
    body: Any = None
    attributes: Mapping[str, Any] = field(default_factory=dict)
    resource: Mapping[str, Any] = field(default_factory=dict)
    scope: str = ""
    trace_id: str = ""
    span_id: str = ""
    severity: int = 0
    index: int = 0
