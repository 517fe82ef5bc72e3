"""The Export call's contract, the same for ``TraceService`` and ``LogsService``.

:class:`ExportCall` runs one request: the bearer token, admission (:mod:`.admission`), the
handler (:mod:`.handlers`), the request metrics, and the answer. A handler returns the
response or a :class:`Failure`; a failure is answered with its status code, and with
``google.rpc.RetryInfo`` when it is retryable (the Collector's OTLP exporter then
retries after ``retry_after`` seconds). An exception escaping a handler answers
``UNAVAILABLE`` with ``RetryInfo``, never ``UNKNOWN`` (which the Collector drops).
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from .admission import Admission
from .metrics import ServiceMetrics
from .otlp import ExportTraceServiceResponse, retry_info_details

__all__ = ["ExportCall", "Failure", "Handler", "TraceExportServicer", "bearer_authorized"]

_log = logging.getLogger("otel_progress.service")


class Failure:
    """What a handler answers instead of a response: a status code, its message, and
    whether the sender should retry (then the answer carries ``RetryInfo``)."""

    __slots__ = ("code", "message", "retry")

    def __init__(self, code: grpc.StatusCode, message: str, retry: bool = False) -> None:
        self.code = code
        self.message = message
        self.retry = retry


Handler = Callable[[bytes, grpc.ServicerContext], Any]
"""A request's work: ``(raw request, context) -> response or Failure``."""


class _Status(grpc.Status):
    def __init__(self, code: grpc.StatusCode, details: str, trailing_metadata: Sequence[tuple[str, Any]] = ()):
        self.code = code
        self.details = details
        self.trailing_metadata = tuple(trailing_metadata)


def bearer_authorized(context: grpc.ServicerContext, token: str) -> bool:
    """Whether the call's metadata has ``authorization: Bearer <token>`` (compared in
    constant time)."""
    for key, value in context.invocation_metadata() or ():
        if key.lower() == "authorization" and isinstance(value, str):
            scheme, _, sent = value.strip().partition(" ")
            if scheme.lower() == "bearer" and hmac.compare_digest(sent.strip().encode(), token.encode()):
                return True
    return False


class ExportCall:
    """Runs an Export request through authentication, admission and a handler, counts it
    (``progress.service.requests`` by result, ``progress.service.request.duration``) and
    answers. Never raises anything but grpcio's abort."""

    def __init__(self, token: str, admission: Admission, metrics: ServiceMetrics, retry_after: float) -> None:
        self._token = token
        self._admission = admission
        self._metrics = metrics
        self._retry_after = retry_after

    def __call__(self, raw: bytes, context: grpc.ServicerContext, handle: Handler) -> Any:
        started = time.monotonic()
        outcome: Any
        if self._token and not bearer_authorized(context, self._token):
            outcome = Failure(grpc.StatusCode.UNAUTHENTICATED,
                              "missing or wrong bearer token: send metadata 'authorization: Bearer <token>'")
        elif (refusal := self._admission.enter(len(raw))) is not None:
            outcome = Failure(grpc.StatusCode.UNAVAILABLE, refusal, retry=True)
        else:
            try:
                outcome = handle(bytes(raw), context)
            except Exception as exc:  # never UNKNOWN
                self._metrics.add("progress.service.errors")
                _log.exception("otel-progress: unexpected error in Export")
                outcome = Failure(grpc.StatusCode.UNAVAILABLE, f"otel-progress internal error: {exc}", retry=True)
            finally:
                self._admission.leave(len(raw))
        self._metrics.add("progress.service.request.duration", time.monotonic() - started)
        if isinstance(outcome, Failure):
            self._metrics.add("progress.service.requests", 1, {"result": outcome.code.name.lower()})
            metadata: tuple[tuple[str, Any], ...] = ()
            if outcome.retry:
                metadata = (("grpc-status-details-bin",
                             retry_info_details(outcome.code.value[0], outcome.message, self._retry_after)),)
            context.abort_with_status(_Status(outcome.code, outcome.message, metadata))
        self._metrics.add("progress.service.requests", 1, {"result": "ok"})
        return outcome


class TraceExportServicer(trace_service_pb2_grpc.TraceServiceServicer):
    """The generated servicer; ``Export`` receives the request as bytes."""

    def __init__(self, export: Callable[[Any, grpc.ServicerContext], ExportTraceServiceResponse]) -> None:
        self._export = export

    def Export(self, request: Any, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        return self._export(request, context)
