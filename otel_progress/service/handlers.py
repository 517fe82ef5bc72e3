"""What the service does with one admitted Export request: detect, then forward.

:class:`TraceHandler` runs a trace batch through the detector; inline, it annotates the
batch (or leaves it byte for byte as received) and forwards it, answering what the
downstream answered; in tap mode it only queues the annotation spans and answers at once.
:class:`LogsHandler` does the same for a logs request (:mod:`.logs`).

Failure semantics (see docs/service.md): a retryable downstream failure (the Collector's
own rule, see :mod:`.forwarder`) answers ``UNAVAILABLE``, retryable; a permanent downstream
failure is answered with the downstream's code (the sender drops the batch instead of
retrying it forever), logged and counted; a request that does not decode answers
``INVALID_ARGUMENT``. A bug in detection or annotation loses no data: the batch is
forwarded as received, and the error counted and logged.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from .annotate import annotated_request, tap_items
from .detector import BatchDetector, BatchResult, MalformedRequest
from .downstream import RateLimitedLog
from .forwarder import ForwardResult
from .logs import ExportLogsServiceResponse, LogsDetector, MalformedLogsRequest
from .metrics import ServiceMetrics
from .options import ServiceConfig
from .otlp import ExportTraceServiceResponse
from .outputs import Outputs
from .rpc import Failure

__all__ = ["LogsHandler", "TraceHandler", "forward_timeout"]

_log = logging.getLogger("otel_progress.service")


def forward_timeout(context: grpc.ServicerContext, configured: float) -> float:
    """``configured`` (the forward timeout), shortened to end 0.25 s before the caller's
    deadline."""
    remaining = context.time_remaining()
    timeout = configured
    if remaining is not None:
        timeout = min(timeout, max(0.05, remaining - 0.25))
    return timeout


class TraceHandler:
    """``TraceService/Export``'s work: ``handle(raw, context)`` returns the response or a
    :class:`.rpc.Failure`."""

    def __init__(self, cfg: ServiceConfig, detector: BatchDetector, outputs: Outputs, metrics: ServiceMetrics,
                 log: RateLimitedLog) -> None:
        self._cfg = cfg
        self._detector = detector
        self._outputs = outputs
        self._metrics = metrics
        self._log = log

    def handle(self, raw: bytes, context: grpc.ServicerContext) -> ExportTraceServiceResponse | Failure:
        result: BatchResult | None
        try:
            result = self._detector.process(raw)
        except MalformedRequest as exc:
            return Failure(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Exception:
            # A bug in detection must not lose data: forward the batch as received.
            self._metrics.add("progress.service.errors")
            _log.exception("otel-progress: detection failed; forwarding the batch unannotated")
            result = None
        detection_logs = self._outputs.detection_logs
        if result is not None and detection_logs is not None:
            result = detection_logs.route(raw, result)  # (log mode: the spans are left alone)

        if self._cfg.mode == "tap":
            if result is not None and result.new_detections:
                self._tap_findings(raw, result)
            return ExportTraceServiceResponse()
        return self._forward(raw, context, result)

    def _forward(self, raw: bytes, context: grpc.ServicerContext,
                 result: BatchResult | None) -> ExportTraceServiceResponse | Failure:
        out = raw
        if result is not None and result.placements:
            try:
                out, _written = annotated_request(raw, result.placements)
                self._metrics.add("progress.service.batches.annotated")
            except Exception:
                self._metrics.add("progress.service.errors")
                _log.exception("otel-progress: annotating failed; forwarding the batch unannotated")
                out = raw
        forwarder, downstream = self._outputs.forwarder, self._outputs.downstream
        fwd = forwarder.forward_all(out, forward_timeout(context, self._cfg.forward_timeout),
                                    self._cfg.forward_max_mib * 1024 * 1024)
        if downstream is not None:
            downstream.record(fwd.ok, fwd.code, fwd.message)
        if fwd.pieces > 1:
            self._metrics.add("progress.service.forward.split", 1)
        if fwd.ok:
            return fwd.response if fwd.response is not None else ExportTraceServiceResponse()
        return self._failed(raw, result, fwd)

    def _failed(self, raw: bytes, result: BatchResult | None, fwd: ForwardResult) -> Failure:
        endpoint = self._outputs.forwarder.endpoint
        code = fwd.code.name
        if fwd.permanent:
            spans = result.spans if result is not None else self._detector.count_spans(raw)
            self._metrics.add("progress.service.forward.failures", 1, {"code": code.lower(), "outcome": "permanent"})
            self._metrics.add("progress.service.forward.dropped", spans)
            self._log.log(f"permanent-{code}", logging.ERROR,
                          f"otel-progress: downstream {endpoint} rejected a batch of {spans} spans permanently"
                          f" ({code}: {fwd.message[:300]}); answered {code}, so the sender drops it"
                          " instead of retrying")
            status = fwd.code if fwd.code is not grpc.StatusCode.OK else grpc.StatusCode.INTERNAL
            return Failure(status, f"downstream {endpoint} rejected the data permanently ({code}):"
                                   f" {fwd.message}")
        self._metrics.add("progress.service.forward.failures", 1, {"code": code.lower(), "outcome": "retry"})
        self._log.log(f"retry-{code}", logging.WARNING,
                      f"otel-progress: forward to {endpoint} failed ({code}: {fwd.message[:300]});"
                      " batch not acknowledged, the sender retries it")
        return Failure(grpc.StatusCode.UNAVAILABLE,
                       f"downstream {endpoint} failed ({code}: {fwd.message}); not acknowledged, retry",
                       retry=True)

    def _tap_findings(self, raw: bytes, result: BatchResult) -> None:
        tap = self._outputs.tap
        assert tap is not None
        for resource, span in tap_items(raw, result.placements, result.new_detections):
            tap.submit(resource, span)


class LogsHandler:
    """``LogsService/Export``'s work: detect in a logs request, then forward it (inline:
    annotated; tap: only the detection records and evaluation records go to the tap
    target). ``handle(raw, context)`` returns the response or a :class:`.rpc.Failure`."""

    def __init__(self, cfg: ServiceConfig, logs: LogsDetector, outputs: Outputs, metrics: ServiceMetrics,
                 log: RateLimitedLog) -> None:
        self._cfg = cfg
        self._logs = logs
        self._outputs = outputs
        self._metrics = metrics
        self._log = log

    def handle(self, raw: bytes, context: grpc.ServicerContext) -> ExportLogsServiceResponse | Failure:
        out = raw
        new: list[Any] = []
        try:
            result = self._logs.process(raw)
        except MalformedLogsRequest as exc:
            return Failure(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Exception:
            self._metrics.add("progress.service.errors")
            _log.exception("otel-progress: detection in logs failed; forwarding the batch unannotated")
            result = None
        if result is not None:
            new = result.new_detections
            if result.annotated and self._cfg.mode == "inline":
                out = result.request.SerializeToString()
                self._metrics.add("progress.service.batches.annotated")
        if self._cfg.mode == "tap":
            logs_tap = self._outputs.logs_tap
            if result is not None and new and logs_tap is not None:
                logs_tap.submit(self._logs.findings_request(result))
            return ExportLogsServiceResponse()
        fwd = self._outputs.logs_forwarder.forward(out, forward_timeout(context, self._cfg.forward_timeout))
        downstream = self._outputs.downstream
        if downstream is not None:
            downstream.record(fwd.ok, fwd.code, fwd.message)
        if fwd.ok:
            return ExportLogsServiceResponse()
        return self._failed(result.records if result is not None else 0, fwd)

    def _failed(self, records: int, fwd: ForwardResult) -> Failure:
        endpoint = self._outputs.logs_forwarder.endpoint
        code = fwd.code.name
        if fwd.permanent:
            self._metrics.add("progress.service.forward.failures", 1, {"code": code.lower(), "outcome": "permanent"})
            self._log.log(f"permanent-logs-{code}", logging.ERROR,
                          f"otel-progress: downstream {endpoint} rejected a batch of {records} log records"
                          f" permanently ({code}: {fwd.message[:300]}); answered {code}, so the sender drops it")
            status = fwd.code if fwd.code is not grpc.StatusCode.OK else grpc.StatusCode.INTERNAL
            return Failure(status, f"downstream {endpoint} rejected the data permanently ({code}): {fwd.message}")
        self._metrics.add("progress.service.forward.failures", 1, {"code": code.lower(), "outcome": "retry"})
        self._log.log(f"retry-logs-{code}", logging.WARNING,
                      f"otel-progress: forward of log records to {endpoint} failed ({code}: {fwd.message[:300]});"
                      " batch not acknowledged, the sender retries it")
        return Failure(grpc.StatusCode.UNAVAILABLE,
                       f"downstream {endpoint} failed ({code}: {fwd.message}); not acknowledged, retry", retry=True)
