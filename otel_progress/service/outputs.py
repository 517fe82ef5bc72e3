"""Where the service's data goes, by mode: the forwarders, taps and metrics pusher of a
running service, built from its :class:`.options.ServiceConfig` and shut down together.

Inline mode forwards every batch to ``forward_endpoint`` (and watches that the downstream
is reachable, :class:`.downstream.DownstreamState`); tap mode forwards nothing and sends
annotation spans to ``tap_target`` (:class:`.tap.TapExporter`). Both send log records
(the detection records, and the findings of log runs that end idle) through a logs tap to
the same endpoint, and push the service's metrics when a metrics endpoint is set.
"""

from __future__ import annotations

from collections.abc import Callable

from .downstream import DownstreamState, RateLimitedLog
from .forwarder import Forwarder
from .log_events import DetectionLogs, DetectionLogsTap
from .logs import LogsForwarder
from .metrics import ServiceMetrics
from .options import ServiceConfig
from .tap import LogsTap, MetricsPusher, TapExporter

__all__ = ["Outputs"]


class Outputs:
    """The service's outputs. ``forwarder`` sends trace requests (inline: every batch;
    tap: the annotation spans); ``downstream`` is set in inline mode only; ``tap`` in tap
    mode only; ``detection_logs`` unless ``--detection-events span``."""

    def __init__(self, cfg: ServiceConfig, metrics: ServiceMetrics, log: RateLimitedLog,
                 metrics_request: Callable[[], bytes]) -> None:
        self._cfg = cfg
        self.downstream: DownstreamState | None = None
        self.tap: TapExporter | None = None
        self.detection_logs: DetectionLogs | None = None
        self.pusher: MetricsPusher | None = None
        self.metrics_forwarder: Forwarder | None = None
        if cfg.mode == "inline":
            self.forwarder = self._forwarder_for(cfg.forward_endpoint)
            self.downstream = DownstreamState(cfg.forward_endpoint, log, probe_interval=cfg.forward_probe_interval,
                                              probe_timeout=min(1.0, cfg.forward_timeout))
        else:
            self.forwarder = self._forwarder_for(cfg.tap_target)
            self.tap = TapExporter(self.forwarder, metrics)
        self.logs_forwarder = LogsForwarder(
            cfg.forward_endpoint if cfg.mode == "inline" else cfg.tap_target, timeout=cfg.forward_timeout,
            compression=cfg.forward_compression, insecure=cfg.forward_insecure, ca_file=cfg.forward_ca,
            headers=cfg.forward_headers, max_message_mib=cfg.max_receive_mib + 1)
        # (in inline mode too: the records of the log runs that end idle have no request to go in)
        self.logs_tap: LogsTap = DetectionLogsTap(self.logs_forwarder, metrics)
        if cfg.detection_events != "span":
            self.detection_logs = DetectionLogs(cfg.detection_events, self.logs_tap, metrics)
        metrics_endpoint = cfg.metrics_endpoint or (cfg.tap_target if cfg.mode == "tap" else "")
        if metrics_endpoint:
            self.metrics_forwarder = (self.forwarder if metrics_endpoint == self.forwarder.endpoint
                                      else self._forwarder_for(metrics_endpoint))
            self.pusher = MetricsPusher(self.metrics_forwarder, metrics_request, cfg.metrics_interval)

    def _forwarder_for(self, endpoint: str) -> Forwarder:
        cfg = self._cfg
        return Forwarder(endpoint, timeout=cfg.forward_timeout, compression=cfg.forward_compression,
                         insecure=cfg.forward_insecure, ca_file=cfg.forward_ca, headers=cfg.forward_headers,
                         max_message_mib=cfg.max_receive_mib + 1)

    def probe_downstream(self, when_due: bool = True) -> None:
        """Inline mode: probe the downstream (:meth:`.downstream.DownstreamState.probe`),
        when due (``when_due``) or now. Tap mode: nothing."""
        state = self.downstream
        if state is not None and (not when_due or state.probe_due()):
            state.probe(self.forwarder)

    def shutdown(self, deadline: float) -> None:
        """Send what the taps hold until ``deadline`` (``time.monotonic()``; both taps at
        once; the rest is dropped, counted and logged: :mod:`.tap`), push the metrics a
        last time, and close every channel."""
        taps = [t for t in (self.tap, self.logs_tap) if t is not None]
        for tap in taps:
            tap.stop(deadline)
        for tap in taps:
            tap.join()
        if self.pusher is not None:
            self.pusher.shutdown()
        for fwd in {id(f): f for f in (self.forwarder, self.metrics_forwarder) if f is not None}.values():
            fwd.close()
        self.logs_forwarder.close()
