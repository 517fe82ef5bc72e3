"""``otel-progress serve``: detections found in traces as ``gen_ai.evaluation.result`` log
records, on the service's logs export.

Each new detection of a trace batch becomes the record of :mod:`otel_progress.model.evaluation`
as an OTLP ``LogRecord``: trace and span ids of the span the detection belongs on, time the
end of that span (when it is in the batch), in a ``ResourceLogs`` with the resource of that
span's ``ResourceSpans`` (so ``service.name`` is the agent's, as for its spans) and the
scope ``otel-progress.service``. String values are cut to 256 characters, as on spans.

The records leave through the batching logs queue of :mod:`.tap` (:class:`~.tap.LogsTap`,
one background thread, bounded, retried with backoff, drained within ``--drain-timeout``
at shutdown; counted in ``progress.service.tap.*`` with ``signal=logs``): in inline mode
to the logs downstream (``LogsService/Export`` on ``--forward-endpoint``), in tap mode to
the tap endpoint, beside the detection records of coding agents' log input. They never
hold up the trace batch: it is acknowledged when its own forward succeeded, and a retried
batch (which finds no new detection) sends no second record.

``--detection-events`` chooses: ``both`` (the default) writes the spans' events and
attributes (inline) or annotation spans (tap) as before, and the records; ``log`` only
the records (the spans are forwarded as received); ``span`` only the spans.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from ..model import Detection
from ..model.evaluation import evaluation_event
from ..model.limits import MAX_METRIC_CHARS, clip_chars
from ..model.version import __version__
from .annotate import SCOPE_NAME
from .detector import BatchResult, Placement
from .forwarder import ForwardResult, UnaryExporter
from .metrics import ServiceMetrics
from .otlp import SlimRequest, key_values
from .tap import LogsTap

__all__ = ["SCOPE_BYTES", "DetectionLogs", "DetectionLogsTap", "evaluation_record", "evaluation_request"]

_log = logging.getLogger("otel_progress.service")

#: Characters kept of a string value (the explanation and body keep their 1024 bytes).
_MAX_VALUE_CHARS = MAX_METRIC_CHARS
_LONG = frozenset({"gen_ai.evaluation.explanation"})
_UNKNOWN_SERVICE = resource_pb2.Resource(attributes=key_values({"service.name": "unknown_service"}))


def evaluation_record(det: Detection, time_ns: int, flags: int = 0, observed_ns: int | None = None, *,
                      span_context: tuple[bytes, bytes] | None = None) -> Any:
    """The ``gen_ai.evaluation.result`` record of ``det`` as a protobuf ``LogRecord``, in the
    context of the detection's span, or of ``span_context`` (trace id, span id: bytes, maybe
    empty) when given (a detection in coding agents' log input, whose ids are a run key and
    a tool call id: the offending log record's context)."""
    event = evaluation_event(det)
    trace_id, span_id = span_context if span_context is not None else (
        bytes.fromhex(event.trace_id), bytes.fromhex(event.span_id))
    record = logs_pb2.LogRecord(
        time_unix_nano=time_ns,
        observed_time_unix_nano=time.time_ns() if observed_ns is None else observed_ns,
        severity_number=event.severity_number,  # type: ignore[arg-type]
        severity_text=event.severity_text,
        event_name=event.event_name,
        trace_id=trace_id,
        span_id=span_id,
        flags=flags & 0xFF,
    )
    record.body.string_value = event.body
    attrs = {key: clip_chars(value, _MAX_VALUE_CHARS) if isinstance(value, str) and key not in _LONG else value
             for key, value in event.attributes.items()}
    record.attributes.extend(key_values(attrs))
    return record


def _scope() -> common_pb2.InstrumentationScope:
    return common_pb2.InstrumentationScope(name=SCOPE_NAME, version=__version__)


#: The serialized scope of the records (``otel-progress.service`` and the version).
SCOPE_BYTES: bytes = _scope().SerializeToString()


def evaluation_request(raw: bytes, placements: Sequence[Placement], detections: Sequence[Detection]) -> Any:
    """An ``ExportLogsServiceRequest`` with one record per detection in ``detections``,
    each in the resource of its span's ``ResourceSpans`` in the trace request ``raw`` (as
    ``placements`` place it: on its span, else detached under a span of the same trace),
    timed at the end of that span when it is in the request (else now). Only the resources
    and spans the placements point at are decoded (the request is read slim); a part that
    cannot be decoded gives the resource ``unknown_service``, or the time now."""
    where: dict[int, Placement] = {}
    for p in placements:  # the detection's own placement, rather than its repeat on the agent span
        known = where.get(id(p.detection))
        if known is None or (known.on_agent and not p.on_agent):
            where[id(p.detection)] = p
    try:
        request: Any = SlimRequest.FromString(raw)
    except Exception:
        request = None
    now = time.time_ns()
    out = logs_service_pb2.ExportLogsServiceRequest()
    scopes: dict[int, Any] = {}  # resource index -> its ScopeLogs in ``out``
    for det in detections:
        p = where.get(id(det))
        index, when, flags = -1, now, 0
        if request is not None and request.resource_spans:
            index = p.resource_index if p is not None and 0 <= p.resource_index < len(request.resource_spans) else 0
            if p is not None and p.loc is not None and not p.on_agent:
                ri, si, j = p.loc
                try:
                    span = trace_pb2.Span.FromString(request.resource_spans[ri].scope_spans[si].spans[j])
                    when = span.end_time_unix_nano or span.start_time_unix_nano or now
                    flags = span.flags
                except Exception:  # the time now
                    pass
        scope_logs = scopes.get(index)
        if scope_logs is None:
            resource = _UNKNOWN_SERVICE
            if index >= 0:
                with contextlib.suppress(Exception):  # (else kept as unknown_service)
                    resource = resource_pb2.Resource.FromString(request.resource_spans[index].resource)
            rl = out.resource_logs.add()
            rl.resource.CopyFrom(resource)
            scope_logs = scopes[index] = rl.scope_logs.add(scope=_scope())
        scope_logs.log_records.append(evaluation_record(det, when, flags, now))
    return out


class DetectionLogsTap(LogsTap):
    """The logs queue of :mod:`.tap`, telling once, in words, what a downstream without a
    logs pipeline means (``UNIMPLEMENTED``: the Collector has no logs pipeline on that
    receiver), besides the queue's own warning per dropped batch."""

    def __init__(self, forwarder: UnaryExporter, metrics: ServiceMetrics, **kwargs: Any) -> None:
        self._told = False
        super().__init__(forwarder, metrics, **kwargs)

    def _forward(self, raw: bytes, timeout: float | None) -> ForwardResult:
        result = super()._forward(raw, timeout)
        if result.code is grpc.StatusCode.UNIMPLEMENTED and not self._told:
            self._told = True
            _log.warning(
                "otel-progress: %s does not accept log records (UNIMPLEMENTED: no logs pipeline on its OTLP"
                " receiver), so the detections' log records (gen_ai.evaluation.result, progress.*) are dropped:"
                " add a logs pipeline (collector-config/sink.yaml has one), or, for traces only, run serve with"
                " --detection-events span",
                self.endpoint)
        return result


@dataclasses.dataclass
class DetectionLogs:
    """The ``--detection-events`` setting of a running service: sends the records of the
    detections found in trace batches through ``tap`` and says what the span path does."""

    mode: str
    tap: LogsTap
    metrics: ServiceMetrics

    def route(self, raw: bytes, result: BatchResult) -> BatchResult:
        """Queue the records of the batch's new detections; return the result the span path
        applies (in ``log`` mode without its placements: the spans are left alone). Never
        raises: a failure is counted in ``progress.service.errors`` and logged."""
        if result.new_detections:
            try:
                request = evaluation_request(raw, result.placements, result.new_detections)
                queued = self.tap.submit(request)
                self.metrics.add("progress.service.detections.logged", queued)
            except Exception:
                self.metrics.add("progress.service.errors")
                _log.exception("otel-progress: writing detections as log records failed")
        if self.mode == "log" and result.placements:
            return dataclasses.replace(result, placements=[])
        return result

    def detached(self, detections: Sequence[Detection]) -> None:
        """Queue the records of detections that have no request to go in (a trace closed
        or evicted, a grouped run ended idle: :meth:`BatchDetector.maintain`), in the
        resource ``unknown_service`` and the context of their spans. Never raises."""
        if not detections:
            return
        try:
            queued = self.tap.submit(evaluation_request(b"", [], detections))
            self.metrics.add("progress.service.detections.logged", queued)
        except Exception:
            self.metrics.add("progress.service.errors")
            _log.exception("otel-progress: writing detections as log records failed")
