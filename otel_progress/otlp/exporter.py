"""An OpenTelemetry SDK span exporter that writes OTLP/JSON lines to a file.

Each export becomes one ``ExportTraceServiceRequest`` line in OTLP/JSON (hex ids, 64-bit
integers as strings, enums as integers): the format of the Collector's file exporter,
which ``otel-progress scan`` reads. Used by ``otel-progress demo`` and the manual-SDK
example; also re-exported from :mod:`otel_progress.demo`.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Sequence
from typing import IO, Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from .files import encode_attributes

__all__ = ["OtlpJsonFileExporter"]



def _span_json(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.context
    out: dict[str, Any] = {
        "traceId": format(ctx.trace_id, "032x"),
        "spanId": format(ctx.span_id, "016x"),
        "name": span.name,
        "kind": int(span.kind.value) + 1,  # the SDK's INTERNAL is 0, OTLP's is 1
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or 0),
        "attributes": encode_attributes(span.attributes),
        "status": {"code": int(span.status.status_code.value)},
    }
    if span.parent is not None:
        out["parentSpanId"] = format(span.parent.span_id, "016x")
    if span.status.description:
        out["status"]["message"] = span.status.description
    if span.events:
        out["events"] = [
            {"timeUnixNano": str(e.timestamp), "name": e.name, "attributes": encode_attributes(e.attributes)}
            for e in span.events
        ]
    if span.links:
        out["links"] = [
            {"traceId": format(link.context.trace_id, "032x"), "spanId": format(link.context.span_id, "016x"),
             "attributes": encode_attributes(link.attributes)}
            for link in span.links
        ]
    return out


class OtlpJsonFileExporter(SpanExporter):
    """Writes each export as one OTLP/JSON ``ExportTraceServiceRequest`` line (the
    Collector file exporter's format, which ``otel-progress scan`` reads)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, stream: IO[str] | None = None) -> None:
        if stream is None and path is None:
            raise ValueError("OtlpJsonFileExporter needs a path or a stream")
        self._stream = stream if stream is not None else open(path, "a", encoding="utf-8")  # noqa: SIM115
        self._owned = stream is None
        self._lock = threading.Lock()
        self.spans_written = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        groups: dict[tuple[int, str, str], tuple[Any, Any, list[dict[str, Any]]]] = {}
        for span in spans:
            scope = span.instrumentation_scope
            key = (id(span.resource), getattr(scope, "name", ""), getattr(scope, "version", "") or "")
            if key not in groups:
                groups[key] = (span.resource, scope, [])
            groups[key][2].append(_span_json(span))
        by_resource: dict[int, dict[str, Any]] = {}
        for (rid, _, _), (resource, scope, items) in groups.items():
            entry = by_resource.setdefault(rid, {
                "resource": {"attributes": encode_attributes(resource.attributes if resource else {})},
                "scopeSpans": [],
            })
            scope_json: dict[str, Any] = {"name": getattr(scope, "name", "") or ""}
            if getattr(scope, "version", None):
                scope_json["version"] = scope.version
            entry["scopeSpans"].append({"scope": scope_json, "spans": items})
        line = json.dumps({"resourceSpans": list(by_resource.values())}, separators=(",", ":"))
        try:
            with self._lock:
                self._stream.write(line + "\n")
                self._stream.flush()
                self.spans_written += len(spans)
        except (OSError, ValueError):
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        if self._owned:
            with contextlib.suppress(OSError):
                self._stream.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
