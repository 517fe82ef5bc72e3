"""Tap mode's findings exporter and the periodic OTLP metrics exporter.

:class:`TapExporter` queues annotation spans (bounded) and sends them in batches from a
background thread, retrying failures with exponential backoff for up to
``max_elapsed`` seconds. Detections are deduplicated upstream (a redelivered span gives
no new detection) and annotation span ids are stable, so a retried export cannot create
a second annotation. :class:`MetricsPusher` sends the service's metrics every interval.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from .annotate import tap_request
from .forwarder import Forwarder, ForwardResult
from .metrics import ServiceMetrics

__all__ = ["MetricsPusher", "TapExporter", "send_with_backoff"]

_log = logging.getLogger(__name__)


class TapExporter:
    """Sends annotation spans to an OTLP/gRPC endpoint from a background thread."""

    def __init__(
        self,
        forwarder: Forwarder,
        metrics: ServiceMetrics,
        *,
        max_queue: int = 10_000,
        max_batch: int = 512,
        flush_interval: float = 0.5,
        max_elapsed: float = 60.0,
    ) -> None:
        self.forwarder = forwarder
        self.metrics = metrics
        self.max_batch = max_batch
        self.flush_interval = flush_interval
        self.max_elapsed = max_elapsed
        self._queue: queue.Queue[tuple[resource_pb2.Resource, trace_pb2.Span]] = queue.Queue(max_queue)
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name="otel-progress-tap", daemon=True)
        self._thread.start()

    def submit(self, resource: resource_pb2.Resource, span: trace_pb2.Span) -> bool:
        """Queue one annotation span; False (and counted) when the queue is full."""
        try:
            self._idle.clear()
            self._queue.put_nowait((resource, span))
            return True
        except queue.Full:
            self.metrics.add("progress.service.tap.dropped")
            return False

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything queued was sent (or given up); True if it was."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._queue.empty() and self._idle.is_set():
                return True
            time.sleep(0.02)
        return False

    def shutdown(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                first = self._queue.get(timeout=self.flush_interval)
            except queue.Empty:
                self._idle.set()
                continue
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._send(batch)
            if self._queue.empty():
                self._idle.set()

    def _send(self, batch: list[tuple[resource_pb2.Resource, trace_pb2.Span]]) -> None:
        raw = tap_request(batch).SerializeToString()
        # split when too large for the endpoint
        send_with_backoff(lambda: self.forwarder.forward_all(raw), len(batch), "annotation span(s)", self.metrics,
                          self.max_elapsed, self._stop)


def send_with_backoff(forward: Callable[[], ForwardResult], count: int, what: str, metrics: ServiceMetrics,
                      max_elapsed: float, stop: threading.Event) -> None:
    """Call ``forward`` until it succeeds (``progress.service.tap.exported``: ``count``),
    retrying a retryable failure with exponential backoff (0.2 s doubling, at most 5 s) for up
    to ``max_elapsed`` seconds; a permanent failure, the time running out or ``stop`` drops
    the ``count`` items (``what``, for the warning; ``progress.service.tap.dropped``)."""
    start = time.monotonic()
    delay = 0.2
    while True:
        result = forward()
        if result.ok:
            metrics.add("progress.service.tap.exported", count)
            return
        metrics.add("progress.service.tap.failures")
        if result.permanent or time.monotonic() - start + delay > max_elapsed or stop.is_set():
            _log.warning("otel-progress: dropping %d %s: %s %s", count, what, result.code.name, result.message)
            metrics.add("progress.service.tap.dropped", count)
            return
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


class MetricsPusher:
    """Exports the service's metrics over OTLP every ``interval`` seconds (and at stop)."""

    def __init__(self, forwarder: Forwarder, build: Callable[[], bytes], interval: float) -> None:
        self.forwarder = forwarder
        self.build = build
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="otel-progress-metrics", daemon=True)
        self._thread.start()

    def push(self) -> bool:
        result = self.forwarder.export_metrics(self.build())
        if not result.ok:
            _log.debug("otel-progress: metrics export failed: %s %s", result.code.name, result.message)
        return result.ok

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.push()

    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self.push()
