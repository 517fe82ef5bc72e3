"""``otel-progress serve``: the OTLP/gRPC TraceService/Export detection service (and
LogsService/Export on the same listener, for coding agents' log events: :mod:`.logs`).

The servicer is opentelemetry-proto's generated ``TraceServiceServicer`` registered on
grpcio with a raw-bytes request deserializer, so that a batch that gains no annotation is
forwarded as the exact bytes received.

Failure semantics (what the Collector's OTLP exporter does with each answer, see
docs/service.md): a retryable downstream failure (the Collector's own rule, see
:mod:`.forwarder`), an overload or an internal error answers ``UNAVAILABLE`` with
``google.rpc.RetryInfo`` (retryable); a permanent downstream failure is answered with the
downstream's code (the sender drops the batch instead of retrying it forever), logged and
counted; a request that is not an ``ExportTraceServiceRequest`` answers
``INVALID_ARGUMENT``; a missing or wrong bearer token answers ``UNAUTHENTICATED``. The
servicer never lets an exception escape (grpcio would answer UNKNOWN, which the Collector
drops).
"""

from __future__ import annotations

import gc
import hmac
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from ..engine import ProgressEngine
from ..engine.config import Config, ConfigError
from ..model.version import __version__
from ..runs.budget import StateBudget
from ..runs.model import RunModel
from .annotate import annotated_request, tap_items
from .detector import BatchDetector, BatchResult, MalformedRequest
from .downstream import DownstreamState, RateLimitedLog
from .forwarder import Forwarder
from .health import HealthServer
from .log_events import DetectionLogs, DetectionLogsTap
from .logs import ExportLogsServiceResponse, LogsDetector, LogsForwarder, MalformedLogsRequest
from .metrics import ServiceMetrics
from .options import ServiceConfig, ServiceConfigError
from .otlp import ExportTraceServiceRequest, ExportTraceServiceResponse, retry_info_details
from .tap import LogsTap, MetricsPusher, TapExporter

__all__ = ["ProgressService", "TraceExportServicer", "run_serve"]

_log = logging.getLogger("otel_progress.service")

_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
_LOGS_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"
_REFUSERS = 4  # worker threads beyond max_inflight: they only answer refusals, so none queues
_EMPTY_REQUEST = ExportTraceServiceRequest().SerializeToString()


class _Status(grpc.Status):
    def __init__(self, code: grpc.StatusCode, details: str, trailing_metadata: Sequence[tuple[str, Any]] = ()):
        self.code = code
        self.details = details
        self.trailing_metadata = tuple(trailing_metadata)


class _Failure:
    __slots__ = ("code", "message", "retry")

    def __init__(self, code: grpc.StatusCode, message: str, retry: bool = False) -> None:
        self.code = code
        self.message = message
        self.retry = retry


class TraceExportServicer(trace_service_pb2_grpc.TraceServiceServicer):
    """The generated servicer; ``Export`` receives the request as bytes."""

    def __init__(self, service: ProgressService) -> None:
        self._service = service

    def Export(self, request: Any, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        return self._service.export(request, context)


class ProgressService:
    """The detection service: gRPC server, detector, forwarder or tap exporter, health.

    ``start()`` binds and serves (``port`` and ``health_port`` give the bound ports; a
    listen address with port 0 picks a free one); ``stop()`` drains and shuts down.
    """

    def __init__(self, config: ServiceConfig | None = None, engine_config: Config | None = None) -> None:
        self.config = config if config is not None else ServiceConfig()
        cfg = self.config
        if engine_config is None:
            base = Config.from_file(cfg.config) if cfg.config else None
            engine_config = Config.from_env(base=base)
        self.metrics = ServiceMetrics()
        self.engine = ProgressEngine(engine_config)
        # One run model and one memory budget for traces and logs (one agent's logs and
        # traces are reported once; --max-state-mib bounds both).
        model, budget = RunModel(self.engine), StateBudget(cfg.max_state_mib * 1024 * 1024)
        self.detector = BatchDetector(
            self.engine, self.metrics,
            max_traces=cfg.max_traces, max_spans_per_trace=cfg.max_spans_per_trace,
            trace_ttl=cfg.trace_ttl, close_delay=cfg.close_delay, merge_window=cfg.merge_window,
            batch_cache=cfg.batch_cache, max_state_bytes=cfg.max_state_mib * 1024 * 1024, model=model, budget=budget,
        )
        # A coding agent's run ends when idle for the engine's run TTL (a user's approval or a
        # long model turn can pause a run for minutes), or at its session's end event.
        self.logs = LogsDetector(model, self.metrics, idle_seconds=engine_config.run_ttl_seconds, budget=budget,
                                 detection_events=cfg.detection_events)
        self._logs_forwarder: LogsForwarder | None = None
        self._logs_tap: LogsTap | None = None
        self._detection_logs: DetectionLogs | None = None
        self._token = cfg.token()
        self._forwarder: Forwarder | None = None
        self._tap: TapExporter | None = None
        self._pusher: MetricsPusher | None = None
        self._metrics_forwarder: Forwarder | None = None
        self._server: grpc.Server | None = None
        self._health: HealthServer | None = None
        self._inflight = 0
        self._inflight_bytes = 0
        self._inflight_lock = threading.Lock()
        self._logs = RateLimitedLog(_log)
        self._downstream: DownstreamState | None = None
        self._ready = False
        self._stopped = threading.Event()
        self._stopping = False
        self._maint_stop = threading.Event()
        self._maint: threading.Thread | None = None
        self.port = 0
        self.health_port = 0
        self.instance_id = cfg.instance_id or f"{socket.gethostname()}:{os.getpid()}"
        self.metrics.gauge_callback("progress.service.inflight", lambda: self._inflight)

    # -- lifecycle --------------------------------------------------------------------

    def _forwarder_for(self, endpoint: str) -> Forwarder:
        cfg = self.config
        return Forwarder(endpoint, timeout=cfg.forward_timeout, compression=cfg.forward_compression,
                         insecure=cfg.forward_insecure, ca_file=cfg.forward_ca, headers=cfg.forward_headers,
                         max_message_mib=cfg.max_receive_mib + 1)

    def start(self) -> ProgressService:
        cfg = self.config
        if cfg.mode == "inline":
            self._forwarder = self._forwarder_for(cfg.forward_endpoint)
            self._downstream = DownstreamState(cfg.forward_endpoint, self._logs)
        else:
            self._forwarder = self._forwarder_for(cfg.tap_target)
            self._tap = TapExporter(self._forwarder, self.metrics)
        self._logs_forwarder = LogsForwarder(
            cfg.forward_endpoint if cfg.mode == "inline" else cfg.tap_target, timeout=cfg.forward_timeout,
            compression=cfg.forward_compression, insecure=cfg.forward_insecure, ca_file=cfg.forward_ca,
            headers=cfg.forward_headers, max_message_mib=cfg.max_receive_mib + 1)
        # (in inline mode too: the records of the log runs that end idle have no request to go in)
        self._logs_tap = DetectionLogsTap(self._logs_forwarder, self.metrics)
        if cfg.detection_events != "span":
            self._detection_logs = DetectionLogs(cfg.detection_events, self._logs_tap, self.metrics)
        metrics_endpoint = cfg.metrics_endpoint or (cfg.tap_target if cfg.mode == "tap" else "")
        if metrics_endpoint:
            self._metrics_forwarder = (self._forwarder if metrics_endpoint == self._forwarder.endpoint
                                       else self._forwarder_for(metrics_endpoint))
            self._pusher = MetricsPusher(self._metrics_forwarder, self._metrics_request, cfg.metrics_interval)

        limit = cfg.max_receive_mib * 1024 * 1024
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max(cfg.workers, cfg.max_inflight) + _REFUSERS,
                                       thread_name_prefix="otel-progress-grpc"),
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", 16 * 1024 * 1024),
                ("grpc.so_reuseport", 0),
            ],
        )
        servicer = TraceExportServicer(self)
        handler = grpc.method_handlers_generic_handler(_SERVICE, {
            "Export": grpc.unary_unary_rpc_method_handler(
                servicer.Export,
                request_deserializer=None,  # raw bytes: forwarded unchanged when not annotated
                response_serializer=ExportTraceServiceResponse.SerializeToString,
            ),
        })
        logs_handler = grpc.method_handlers_generic_handler(_LOGS_SERVICE, {
            "Export": grpc.unary_unary_rpc_method_handler(
                self.export_logs,
                request_deserializer=None,
                response_serializer=ExportLogsServiceResponse.SerializeToString,
            ),
        })
        server.add_generic_rpc_handlers((handler, logs_handler))
        try:
            if cfg.tls_cert:
                with open(cfg.tls_cert, "rb") as fh:
                    cert = fh.read()
                with open(cfg.tls_key, "rb") as fh:
                    key = fh.read()
                client_ca = None
                if cfg.tls_client_ca:
                    with open(cfg.tls_client_ca, "rb") as fh:
                        client_ca = fh.read()
                creds = grpc.ssl_server_credentials(((key, cert),), root_certificates=client_ca,
                                                    require_client_auth=client_ca is not None)
                port = server.add_secure_port(cfg.listen, creds)
            else:
                port = server.add_insecure_port(cfg.listen)
        except OSError as exc:
            raise ServiceConfigError(f"cannot read TLS files: {exc}") from exc
        except RuntimeError as exc:
            raise ServiceConfigError(f"cannot listen on {cfg.listen}: {exc}") from exc
        if not port:
            raise ServiceConfigError(f"cannot listen on {cfg.listen} (address in use or not local?)")
        self.port = port
        self._server = server
        if cfg.health_listen:
            try:
                self._health = HealthServer(cfg.health_listen, ready=self.readiness,
                                            metrics_text=self.metrics.prometheus_text,
                                            traces=self.detector.known_traces if cfg.health_traces else None,
                                            token=self._token, max_connections=cfg.health_max_connections,
                                            on_refused=lambda reason: self.metrics.add(
                                                "progress.service.health.refused", 1, {"reason": reason}))
            except OSError as exc:
                server.stop(0)
                raise ServiceConfigError(f"cannot listen on {cfg.health_listen} (health): {exc}") from exc
            self.health_port = self._health.port
            self._health.start()
        server.start()
        self._maint = threading.Thread(target=self._maintain, name="otel-progress-maintain", daemon=True)
        self._maint.start()
        self._ready = True
        return self

    def ready(self) -> bool:
        """Whether the service should receive traffic (``/readyz``): started, not
        draining, and (inline mode) the downstream reachable."""
        return self.readiness()[0]

    def readiness(self) -> tuple[bool, str]:
        """``(ready, why not)``: see :meth:`ready`."""
        if not self._ready:
            return False, "not started"
        if self._stopping:
            return False, "draining"
        if self._downstream is not None and not self._downstream.reachable:
            return False, self._downstream.describe()
        return True, ""

    def describe(self) -> str:
        """The start-up message: where it listens and forwards."""
        cfg = self.config
        host = cfg.listen.rpartition(":")[0]
        listen = f"{host}:{self.port}"
        security = "TLS" + (" + client certificates (mTLS)" if cfg.tls_client_ca else "") if cfg.tls_cert \
            else "plaintext"
        auth = "bearer token required" if self._token else "no authentication"
        lines = [f"otel-progress {__version__} serve: OTLP/gRPC on {listen} ({security}, {auth},"
                 f" max {cfg.max_receive_mib} MiB, {cfg.max_inflight} requests or {cfg.max_inflight_mib} MiB at once)"]
        if cfg.mode == "inline":
            lines.append(f"  mode inline: annotating spans and forwarding every batch to {cfg.forward_endpoint}"
                         f" ({'plaintext' if cfg.forward_insecure else 'TLS'}, {cfg.forward_compression},"
                         f" timeout {cfg.forward_timeout:g}s); acknowledging only after the forward succeeded")
        else:
            lines.append(f"  mode tap: forwarding nothing; annotation spans, detection records and metrics to"
                         f" {cfg.tap_target} (batched; on SIGTERM what is queued is sent within the drain timeout,"
                         f" {cfg.drain_timeout:g}s, the rest dropped, counted and logged)")
        spans = "annotation spans" if cfg.mode == "tap" else "span events and attributes"
        events = {"both": f"{spans}, and gen_ai.evaluation.result log records to the logs endpoint",
                  "span": f"{spans} only",
                  "log": "gen_ai.evaluation.result log records only, to the logs endpoint"}
        lines.append(f"  detections in traces: {events[cfg.detection_events]} (--detection-events"
                     f" {cfg.detection_events})")
        lines.append("  logs: LogsService/Export on the same listener (coding agents' log events; docs/logs.md),"
                     f" a run ends {self.engine.config.run_ttl_seconds:g}s after its last record")
        in_logs = {"both": "the offending record annotated, a progress.* detection record and a"
                           " gen_ai.evaluation.result record",
                   "span": "the offending record annotated and a progress.* detection record",
                   "log": "a gen_ai.evaluation.result record only (the records left as received)"}
        lines.append(f"  detections in logs: {in_logs[cfg.detection_events]}"
                     f"{' (to the tap endpoint)' if cfg.mode == 'tap' else ''}")
        if self._pusher is not None and self._metrics_forwarder is not None:
            lines.append(f"  metrics: OTLP to {self._metrics_forwarder.endpoint} every {cfg.metrics_interval:g}s")
        if self._health is not None:
            hhost = cfg.health_listen.rpartition(":")[0]
            traces = (" /traces" + (" (bearer token)" if self._token else "")) if cfg.health_traces else ""
            lines.append(f"  health: http://{hhost}:{self.health_port}/healthz /readyz /metrics{traces}")
        lines.append(f"  state: at most {cfg.max_traces} traces and {cfg.max_state_mib} MiB,"
                     f" idle TTL {cfg.trace_ttl:g}s,"
                     f" closed {cfg.close_delay:g}s after the root span")
        return "\n".join(lines)

    def stop(self, grace: float | None = None) -> None:
        """Stop accepting requests and drain within ``grace`` seconds (default
        ``drain_timeout``): finish the requests in flight, then send the tap findings
        still queued (both taps at once) until the same deadline; what could not be sent
        is counted and logged (:mod:`.tap`). Then push the metrics a last time (at most
        2 s more) and close everything."""
        if self._stopped.is_set():
            return
        self._stopping = True
        grace = self.config.drain_timeout if grace is None else grace
        deadline = time.monotonic() + grace
        if self._server is not None:
            self._server.stop(grace).wait(grace + 5)
        self._maint_stop.set()
        if self._maint is not None:
            self._maint.join(2.0)
        taps = [t for t in (self._tap, self._logs_tap) if t is not None]
        for tap in taps:
            tap.stop(deadline)
        for tap in taps:
            tap.join()
        if self._pusher is not None:
            self._pusher.shutdown()
        for fwd in {id(f): f for f in (self._forwarder, self._metrics_forwarder) if f is not None}.values():
            fwd.close()
        if self._logs_forwarder is not None:
            self._logs_forwarder.close()
        if self._health is not None:
            self._health.stop()
        self._ready = False
        self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stopped; True if it stopped."""
        return self._stopped.wait(timeout)

    def _maintain(self) -> None:
        while not self._maint_stop.wait(0.5):
            try:
                found = self.detector.maintain()
                if found and self._detection_logs is not None:
                    self._detection_logs.detached(found)  # (no request to go in: as log records)
                ended = self.logs.end_idle()
                if ended.added and self._logs_tap is not None:
                    self._logs_tap.submit(self.logs.findings_request(ended))
                self._probe_downstream()
            except Exception:  # pragma: no cover - never let maintenance die
                self.metrics.add("progress.service.errors")
                _log.exception("otel-progress: maintenance failed")

    def _probe_downstream(self) -> None:
        """While the downstream is marked unreachable, send it an empty Export request
        now and then, so that readiness recovers without traffic."""
        state, fwd = self._downstream, self._forwarder
        if state is None or fwd is None or not state.probe_due():
            return
        result = fwd.forward(_EMPTY_REQUEST, 1.0)
        state.record(result.ok, result.code, result.message)

    def _metrics_request(self) -> bytes:
        resource = {"service.name": self.config.service_name, "service.instance.id": self.instance_id,
                    "service.version": __version__}
        return self.metrics.otlp_request(resource).SerializeToString()

    # -- the RPC ----------------------------------------------------------------------

    def export_logs(self, raw: bytes, context: grpc.ServicerContext) -> ExportLogsServiceResponse:
        """``LogsService/Export``: the same auth, admission, answers and metrics as traces."""
        return self.export(raw, context, self._handle_logs)  # type: ignore[return-value]

    def export(self, raw: bytes, context: grpc.ServicerContext, handle: Any = None) -> ExportTraceServiceResponse:
        started = time.monotonic()
        outcome: ExportTraceServiceResponse | _Failure
        if self._token and not self._authorized(context):
            outcome = _Failure(grpc.StatusCode.UNAUTHENTICATED,
                               "missing or wrong bearer token: send metadata 'authorization: Bearer <token>'")
        elif (refusal := self._enter(len(raw))) is not None:
            outcome = _Failure(grpc.StatusCode.UNAVAILABLE, refusal, retry=True)
        else:
            try:
                outcome = (handle or self._handle)(bytes(raw), context)
            except Exception as exc:  # never UNKNOWN
                self.metrics.add("progress.service.errors")
                _log.exception("otel-progress: unexpected error in Export")
                outcome = _Failure(grpc.StatusCode.UNAVAILABLE, f"otel-progress internal error: {exc}", retry=True)
            finally:
                self._leave(len(raw))
        self.metrics.add("progress.service.request.duration", time.monotonic() - started)
        if isinstance(outcome, _Failure):
            self.metrics.add("progress.service.requests", 1, {"result": outcome.code.name.lower()})
            metadata: tuple[tuple[str, Any], ...] = ()
            if outcome.retry:
                metadata = (("grpc-status-details-bin",
                             retry_info_details(outcome.code.value[0], outcome.message, self.config.retry_after)),)
            context.abort_with_status(_Status(outcome.code, outcome.message, metadata))
        self.metrics.add("progress.service.requests", 1, {"result": "ok"})
        return outcome  # type: ignore[return-value]

    def _authorized(self, context: grpc.ServicerContext) -> bool:
        for key, value in context.invocation_metadata() or ():
            if key.lower() == "authorization" and isinstance(value, str):
                scheme, _, token = value.strip().partition(" ")
                if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self._token.encode()):
                    return True
        return False

    def _enter(self, size: int) -> str | None:
        """Admit a request of ``size`` bytes, or say why not (the service is at
        ``max_inflight`` requests or ``max_inflight_mib`` bytes; a request alone is
        always admitted). Decided before any work, in a thread kept free for it."""
        cfg = self.config
        with self._inflight_lock:
            if self._inflight >= cfg.max_inflight:
                why = f"otel-progress is at its limit of {cfg.max_inflight} requests in flight; retry later"
            elif self._inflight and self._inflight_bytes + size > cfg.max_inflight_mib * 1024 * 1024:
                why = (f"otel-progress is at its limit of {cfg.max_inflight_mib} MiB of requests in flight;"
                       " retry later")
            else:
                self._inflight += 1
                self._inflight_bytes += size
                return None
        self.metrics.add("progress.service.refused", 1)
        return why

    def _leave(self, size: int) -> None:
        with self._inflight_lock:
            self._inflight -= 1
            self._inflight_bytes -= size

    def _forward_timeout(self, context: grpc.ServicerContext) -> float:
        """``forward_timeout``, shortened to end 0.25 s before the caller's deadline."""
        remaining = context.time_remaining()
        timeout = self.config.forward_timeout
        if remaining is not None:
            timeout = min(timeout, max(0.05, remaining - 0.25))
        return timeout

    def _handle(self, raw: bytes, context: grpc.ServicerContext) -> ExportTraceServiceResponse | _Failure:
        result: BatchResult | None
        try:
            result = self.detector.process(raw)
        except MalformedRequest as exc:
            return _Failure(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Exception:
            # A bug in detection must not lose data: forward the batch as received.
            self.metrics.add("progress.service.errors")
            _log.exception("otel-progress: detection failed; forwarding the batch unannotated")
            result = None
        if result is not None and self._detection_logs is not None:
            result = self._detection_logs.route(raw, result)  # (log mode: the spans are left alone)

        if self.config.mode == "tap":
            if result is not None and result.new_detections:
                self._tap_findings(raw, result)
            return ExportTraceServiceResponse()

        out = raw
        if result is not None and result.placements:
            try:
                out, _written = annotated_request(raw, result.placements)
                self.metrics.add("progress.service.batches.annotated")
            except Exception:
                self.metrics.add("progress.service.errors")
                _log.exception("otel-progress: annotating failed; forwarding the batch unannotated")
                out = raw
        assert self._forwarder is not None
        fwd = self._forwarder.forward_all(out, self._forward_timeout(context),
                                          self.config.forward_max_mib * 1024 * 1024)
        if self._downstream is not None:
            self._downstream.record(fwd.ok, fwd.code, fwd.message)
        if fwd.pieces > 1:
            self.metrics.add("progress.service.forward.split", 1)
        if fwd.ok:
            return fwd.response if fwd.response is not None else ExportTraceServiceResponse()
        endpoint = self._forwarder.endpoint
        code = fwd.code.name
        if fwd.permanent:
            spans = result.spans if result is not None else self.detector.count_spans(raw)
            self.metrics.add("progress.service.forward.failures", 1, {"code": code.lower(), "outcome": "permanent"})
            self.metrics.add("progress.service.forward.dropped", spans)
            self._logs.log(f"permanent-{code}", logging.ERROR,
                           f"otel-progress: downstream {endpoint} rejected a batch of {spans} spans permanently"
                           f" ({code}: {fwd.message[:300]}); answered {code}, so the sender drops it"
                           " instead of retrying")
            status = fwd.code if fwd.code is not grpc.StatusCode.OK else grpc.StatusCode.INTERNAL
            return _Failure(status, f"downstream {endpoint} rejected the data permanently ({code}):"
                                    f" {fwd.message}")
        self.metrics.add("progress.service.forward.failures", 1, {"code": code.lower(), "outcome": "retry"})
        self._logs.log(f"retry-{code}", logging.WARNING,
                       f"otel-progress: forward to {endpoint} failed ({code}: {fwd.message[:300]});"
                       " batch not acknowledged, the sender retries it")
        return _Failure(grpc.StatusCode.UNAVAILABLE,
                        f"downstream {endpoint} failed ({code}: {fwd.message}); not acknowledged, retry",
                        retry=True)

    def _handle_logs(self, raw: bytes, context: grpc.ServicerContext) -> ExportLogsServiceResponse | _Failure:
        """Detect in a logs request, then forward it (inline: annotated; tap: only the
        detection records and evaluation records go to the tap target). See :mod:`.logs`."""
        out = raw
        new: list[Any] = []
        try:
            result = self.logs.process(raw)
        except MalformedLogsRequest as exc:
            return _Failure(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Exception:
            self.metrics.add("progress.service.errors")
            _log.exception("otel-progress: detection in logs failed; forwarding the batch unannotated")
            result = None
        if result is not None:
            new = result.new_detections
            if result.annotated and self.config.mode == "inline":
                out = result.request.SerializeToString()
                self.metrics.add("progress.service.batches.annotated")
        assert self._logs_forwarder is not None
        if self.config.mode == "tap":
            if result is not None and new and self._logs_tap is not None:
                self._logs_tap.submit(self.logs.findings_request(result))
            return ExportLogsServiceResponse()
        fwd = self._logs_forwarder.forward(out, self._forward_timeout(context))
        if self._downstream is not None:
            self._downstream.record(fwd.ok, fwd.code, fwd.message)
        if fwd.ok:
            return ExportLogsServiceResponse()
        endpoint = self._logs_forwarder.endpoint
        code = fwd.code.name
        records = result.records if result is not None else 0
        if fwd.permanent:
            self.metrics.add("progress.service.forward.failures", 1, {"code": code.lower(), "outcome": "permanent"})
            self._logs.log(f"permanent-logs-{code}", logging.ERROR,
                           f"otel-progress: downstream {endpoint} rejected a batch of {records} log records"
                           f" permanently ({code}: {fwd.message[:300]}); answered {code}, so the sender drops it")
            status = fwd.code if fwd.code is not grpc.StatusCode.OK else grpc.StatusCode.INTERNAL
            return _Failure(status, f"downstream {endpoint} rejected the data permanently ({code}): {fwd.message}")
        self.metrics.add("progress.service.forward.failures", 1, {"code": code.lower(), "outcome": "retry"})
        self._logs.log(f"retry-logs-{code}", logging.WARNING,
                       f"otel-progress: forward of log records to {endpoint} failed ({code}: {fwd.message[:300]});"
                       " batch not acknowledged, the sender retries it")
        return _Failure(grpc.StatusCode.UNAVAILABLE,
                        f"downstream {endpoint} failed ({code}: {fwd.message}); not acknowledged, retry", retry=True)

    def _tap_findings(self, raw: bytes, result: BatchResult) -> None:
        assert self._tap is not None
        for resource, span in tap_items(raw, result.placements, result.new_detections):
            self._tap.submit(resource, span)


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _tune_gc() -> None:
    """Run Python's cyclic garbage collector less often in the service's process.

    The engine's per-trace state is large and long-lived, and with the default thresholds
    (700, 10, 10) a full collection traverses all of it every few hundred requests: about
    5% of the CPU per request. Reference counting frees nearly everything a request
    allocates, so young objects are collected every 10,000 net allocations instead, and
    the objects of start-up (modules, classes) are frozen out of every collection."""
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


def run_serve(config: ServiceConfig) -> int:
    """Run the service until SIGTERM/SIGINT; returns the exit status. The process is the
    service's own, so its garbage collector is tuned for it (:func:`_tune_gc`)."""
    _configure_logging(config.log_level)
    try:
        service = ProgressService(config).start()
    except (ServiceConfigError, ConfigError) as exc:
        print(f"otel-progress serve: {exc}", file=sys.stderr)
        return 2
    _tune_gc()
    print(service.describe(), file=sys.stderr, flush=True)

    def _stop(signum: int, _frame: Any) -> None:
        queued = (" and the findings queued for the tap endpoint" if config.mode == "tap"
                  else " and the detection log records queued" if config.detection_events != "span" else "")
        print(f"otel-progress serve: {signal.Signals(signum).name}: draining requests in flight{queued}"
              f" (up to {config.drain_timeout:g}s)", file=sys.stderr, flush=True)
        threading.Thread(target=service.stop, name="otel-progress-stop", daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    while not service.wait(0.5):
        pass
    print("otel-progress serve: stopped", file=sys.stderr, flush=True)
    return 0
