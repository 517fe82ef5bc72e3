"""``otel-progress serve``: the OTLP/gRPC TraceService/Export detection service (and
LogsService/Export on the same listener, for coding agents' log events: :mod:`.logs`).

:class:`ProgressService` wires the parts, each in its own module: the detectors
(:mod:`.detector`, :mod:`.logs`), where the data goes (:mod:`.outputs`), the Export call's
contract (:mod:`.rpc`: bearer token, admission by :mod:`.admission`, answers), what a
request does (:mod:`.handlers`: detect, annotate, forward; the failure semantics), the
gRPC listener (:mod:`.listener`), health (:mod:`.health`) and the maintenance thread
(:mod:`.maintenance`). The process around it (signals, logging) is :mod:`.run`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import grpc

from ..engine import ProgressEngine
from ..engine.config import Config
from ..model.version import __version__
from ..runs.budget import StateBudget
from ..runs.model import RunModel
from .admission import Admission
from .describe import startup_message
from .detector import BatchDetector
from .downstream import RateLimitedLog
from .handlers import LogsHandler, TraceHandler
from .health import HealthServer
from .listener import bind_server
from .logs import ExportLogsServiceResponse, LogsDetector
from .maintenance import Maintenance
from .metrics import ServiceMetrics
from .options import ServiceConfig, ServiceConfigError
from .otlp import ExportTraceServiceResponse
from .outputs import Outputs
from .rpc import ExportCall, Handler
from .state import Checkpoints, RedisStore, StateKeeper

__all__ = ["ProgressService"]

_log = logging.getLogger("otel_progress.service")


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
        self.keeper = self._state_keeper(cfg, engine_config)
        self.detector.keeper = self.keeper
        # A coding agent's run ends when idle for the engine's run TTL (a user's approval or a
        # long model turn can pause a run for minutes), or at its session's end event.
        self.logs = LogsDetector(model, self.metrics, idle_seconds=engine_config.run_ttl_seconds, budget=budget,
                                 detection_events=cfg.detection_events)
        if self.keeper is not None:
            self.keeper.logs = self.logs  # (its log runs are carried too)
            self.logs.keeper = self.keeper
        self._token = cfg.token()
        self._lines = RateLimitedLog(_log)
        self._admission = Admission(cfg.max_inflight, cfg.max_inflight_mib, self.metrics)
        self._call = ExportCall(self._token, self._admission, self.metrics, cfg.retry_after)
        self._outputs: Outputs | None = None
        self._traces: TraceHandler | None = None
        self._logs_handler: LogsHandler | None = None
        self._server: grpc.Server | None = None
        self._health: HealthServer | None = None
        self._maintenance: Maintenance | None = None
        self._ready = False
        self._stopped = threading.Event()
        self._stopping = False
        self.port = 0
        self.health_port = 0
        self.instance_id = cfg.instance_id or f"{socket.gethostname()}:{os.getpid()}"
        admission = self._admission
        self.metrics.gauge_callback("progress.service.inflight", lambda: admission.inflight)

    def _state_keeper(self, cfg: ServiceConfig, engine_config: Config) -> StateKeeper | None:
        """Checkpoints and the hand-off store (:mod:`.state`), when asked for."""
        if not cfg.state_dir and not cfg.state_store:
            return None
        checkpoints = Checkpoints(cfg.state_dir, cfg.checkpoint_max_mib * 1024 * 1024) if cfg.state_dir else None
        store = (RedisStore(cfg.state_store, max(cfg.trace_ttl, engine_config.run_ttl_seconds))
                 if cfg.state_store else None)
        return StateKeeper(self.engine.state_codec(), self.metrics, checkpoints=checkpoints,
                           interval=cfg.checkpoint_interval, store=store)

    def _start_state(self) -> None:
        """Restore the checkpoint and reach the store (before serving)."""
        keeper = self.keeper
        if keeper is None:
            return
        if not keeper.codec.keyed:
            _log.warning("otel-progress: no digest key (OTEL_PROGRESS_DIGEST_KEY): run state written to %s is"
                         " checked for integrity but not authenticated; keep it where only the replicas can"
                         " write", "the store" if keeper.store is not None else "the checkpoint")
        if keeper.checkpoints is not None:
            keeper.checkpoints.ensure()
            keeper.restore(self.detector)
        if keeper.store is not None:
            try:
                keeper.store.ping()
            except keeper.store.errors as exc:
                _log.warning("otel-progress: the state store %s cannot be reached yet (%s: %s); runs are"
                             " continued from it once it can", keeper.store.url, type(exc).__name__, exc)

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> ProgressService:
        """Build the outputs, bind the listener and the health server, and serve; returns
        ``self``. Raises :class:`.options.ServiceConfigError` when an address cannot be
        listened on or the TLS files cannot be read."""
        cfg = self.config
        self._start_state()
        outputs = self._outputs = Outputs(cfg, self.metrics, self._lines, self._metrics_request)
        self._traces = TraceHandler(cfg, self.detector, outputs, self.metrics, self._lines)
        self._logs_handler = LogsHandler(cfg, self.logs, outputs, self.metrics, self._lines)
        server, self.port = bind_server(cfg, self.export, self.export_logs)
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
        outputs.probe_downstream(when_due=False)  # ready only once the downstream is reached
        self._maintenance = Maintenance(self.detector, self.logs, outputs, self.metrics, self.keeper)
        self._maintenance.start()
        self._ready = True
        return self

    def ready(self) -> bool:
        """Whether the service should receive traffic (``/readyz``): started, not
        draining, and (inline mode) the downstream reachable: probed at start and whenever
        no forward has told for ``forward_probe_interval`` seconds (:mod:`.downstream`)."""
        return self.readiness()[0]

    def readiness(self) -> tuple[bool, str]:
        """``(ready, why not)``: see :meth:`ready`."""
        if not self._ready:
            return False, "not started"
        if self._stopping:
            return False, "draining"
        downstream = self._outputs.downstream if self._outputs is not None else None
        if downstream is not None and not downstream.reachable:
            return False, downstream.describe()
        return True, ""

    def describe(self) -> str:
        """The start-up message: where it listens and forwards (:mod:`.describe`)."""
        outputs = self._outputs
        metrics_endpoint = (outputs.metrics_forwarder.endpoint
                            if outputs is not None and outputs.pusher is not None
                            and outputs.metrics_forwarder is not None else None)
        return startup_message(self.config, port=self.port, token_required=bool(self._token),
                               run_ttl=self.engine.config.run_ttl_seconds, metrics_endpoint=metrics_endpoint,
                               health_port=self.health_port if self._health is not None else None)

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
        if self._maintenance is not None:
            self._maintenance.stop(2.0)
        if self.keeper is not None:
            self.keeper.checkpoint(self.detector)  # (after the drain: nothing changes the state any more)
            if self.keeper.store is not None:
                self.keeper.store.close()
        if self._outputs is not None:
            self._outputs.shutdown(deadline)
        if self._health is not None:
            self._health.stop()
        self._ready = False
        self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stopped; True if it stopped."""
        return self._stopped.wait(timeout)

    def _metrics_request(self) -> bytes:
        resource = {"service.name": self.config.service_name, "service.instance.id": self.instance_id,
                    "service.version": __version__}
        return self.metrics.otlp_request(resource).SerializeToString()

    # -- the RPC ----------------------------------------------------------------------

    def export(self, raw: bytes, context: grpc.ServicerContext,
               handle: Handler | None = None) -> ExportTraceServiceResponse:
        """``TraceService/Export`` (or, with ``handle``, another Export method): see
        :class:`.rpc.ExportCall`. Serves from :meth:`start` on."""
        assert self._traces is not None, "start() first"
        return self._call(raw, context, handle or self._traces.handle)

    def export_logs(self, raw: bytes, context: grpc.ServicerContext) -> ExportLogsServiceResponse:
        """``LogsService/Export``: the same auth, admission, answers and metrics as traces."""
        assert self._logs_handler is not None, "start() first"
        return self.export(raw, context, self._logs_handler.handle)  # type: ignore[return-value]
