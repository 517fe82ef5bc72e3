"""Tap mode's findings exporters and the periodic OTLP metrics exporter.

Tap mode forwards nothing: it sends what it found to the tap endpoint from two bounded
queues, each emptied by a background thread in batches (everything queued, up to
``max_batch`` items a request, so a slow endpoint gets fewer, larger requests rather than
a growing backlog): :class:`TapExporter` sends annotation spans (``TraceService/Export``),
:class:`LogsTap` the detection log records of coding agents (``LogsService/Export``). A
retryable failure is retried with exponential backoff (0.2 s doubling, at most 5 s) for up
to ``max_elapsed`` seconds. Detections are deduplicated upstream and annotation span ids
are stable, so a retried export cannot create a second annotation.

Shutdown drains: :meth:`stop` sets a deadline (the service passes the end of
``--drain-timeout``), from which on the thread sends back to back, every export and retry
cut to the time left; :meth:`join` waits for it and then counts and logs what was not sent.
Nothing is dropped without a count: ``progress.service.tap.dropped`` by ``signal``
(``traces``, ``logs``) and ``reason`` (``queue_full``, ``rejected``: a permanent failure,
``retries_exhausted``, ``shutdown``: not sent within the drain), each with a log line
(a full queue at most one line every 10 s).

:class:`MetricsPusher` sends the service's metrics every interval.
"""

from __future__ import annotations

import abc
import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from .annotate import tap_request
from .downstream import RateLimitedLog
from .forwarder import Forwarder, ForwardResult, UnaryExporter
from .metrics import ServiceMetrics
from .otlp import SlimLogsRequest

__all__ = ["LogsTap", "MetricsPusher", "TapExporter"]

_log = logging.getLogger(__name__)

T = TypeVar("T")


class _BatchingTap(abc.ABC, Generic[T]):
    """A bounded queue of findings sent in batches by one background thread to
    ``forwarder`` (see the module docstring). Subclasses say how a batch becomes request
    bytes (:meth:`_encode`) and how it is sent (:meth:`_forward`)."""

    signal = ""  # the value of the metrics' ``signal`` attribute
    what = ""  # how the items are named in log lines
    thread_name = "otel-progress-tap"

    def __init__(self, forwarder: Any, metrics: ServiceMetrics, *, max_queue: int = 10_000, max_batch: int = 512,
                 max_elapsed: float = 60.0) -> None:
        self.forwarder = forwarder
        self.endpoint: str = forwarder.endpoint
        self.metrics = metrics
        self.max_queue = max_queue
        self.max_batch = max_batch
        self.max_elapsed = max_elapsed
        self._items: collections.deque[T] = collections.deque()
        self._cond = threading.Condition()
        self._pending = 0  # items queued or being sent
        self._in_hand = 0  # items of the batch being sent
        self._deadline: float | None = None  # set by stop(): the end of the drain
        self._abandoned = False  # join() gave up waiting and counted the batch in hand
        self._dropped_at_shutdown = 0
        self._limited = RateLimitedLog(_log)
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    # -- the public side -----------------------------------------------------------------

    def _put(self, items: Sequence[T]) -> int:
        """Queue ``items`` (as many as there is room for); returns how many were queued."""
        with self._cond:
            closed = self._deadline is not None
            room = 0 if closed else self.max_queue - len(self._items)
            taken = list(items[:max(room, 0)])
            self._items.extend(taken)
            self._pending += len(taken)
            self._cond.notify()
        refused = len(items) - len(taken)
        if refused and closed:  # found after the drain began (the service stops taking requests first)
            self._dropped(refused, "shutdown")
            with self._cond:
                self._dropped_at_shutdown += refused
        elif refused:
            self._dropped(refused, "queue_full")
            self._limited.log(f"tap-full-{self.signal}", logging.WARNING,
                              f"otel-progress: tap queue full ({self.max_queue} {self.what}): dropped {refused}"
                              f" {self.what} for {self.endpoint}")
        return len(taken)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything queued was sent (or given up); True if it was."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    def stop(self, deadline: float) -> None:
        """Begin the drain: send what is queued until ``deadline`` (``time.monotonic()``),
        taking nothing new. Returns at once; :meth:`join` waits for the drain's end."""
        with self._cond:
            self._deadline = deadline if self._deadline is None else min(self._deadline, deadline)
            self._cond.notify_all()

    def join(self) -> int:
        """Wait for the drain begun by :meth:`stop`; count and log what was not sent.
        Returns how many items were dropped at shutdown."""
        deadline = self._deadline if self._deadline is not None else time.monotonic()
        self._thread.join(max(0.0, deadline - time.monotonic()) + 1.0)
        with self._cond:
            left = len(self._items)
            self._items.clear()
            self._pending -= left
            if self._thread.is_alive() and self._in_hand:  # an export outlived its deadline
                left += self._in_hand
                self._pending -= self._in_hand
                self._abandoned = True
            self._cond.notify_all()
        if left:
            self._dropped(left, "shutdown")
        with self._cond:
            dropped = self._dropped_at_shutdown + left
        if dropped:
            _log.warning("otel-progress: shutdown: dropped %d %s that could not be sent to %s within the drain"
                         " timeout (progress.service.tap.dropped{reason=shutdown})", dropped, self.what,
                         self.endpoint)
        return dropped

    def shutdown(self, timeout: float = 5.0) -> int:
        """:meth:`stop` with a deadline ``timeout`` seconds from now, then :meth:`join`."""
        self.stop(time.monotonic() + timeout)
        return self.join()

    # -- the thread ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and self._deadline is None:
                    self._cond.wait()
                if not self._items or self._past_deadline():
                    return  # drained, or out of time: join() counts what is left
                batch = [self._items.popleft() for _ in range(min(self.max_batch, len(self._items)))]
                self._in_hand = len(batch)
            try:
                self._send(batch)
            except Exception:  # never let the thread die with findings queued
                _log.exception("otel-progress: tap export failed")
                self._resolve(len(batch), "rejected")
            finally:
                with self._cond:
                    self._in_hand = 0
                    self._cond.notify_all()

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _time_left(self) -> float | None:
        """Seconds until the drain's deadline (None: not draining)."""
        deadline = self._deadline
        return None if deadline is None else deadline - time.monotonic()

    def _send(self, batch: list[T]) -> None:
        raw = self._encode(batch)
        count = len(batch)
        start = time.monotonic()
        delay = 0.2
        while True:
            left = self._time_left()
            if left is not None and left <= 0:
                self._resolve(count, "shutdown")
                return
            result = self._forward(raw, left)
            if result.ok:
                self._resolve(count, "")
                return
            self.metrics.add("progress.service.tap.failures", 1, {"signal": self.signal})
            why = f"{result.code.name} {result.message}"[:300]
            if result.permanent:
                self._resolve(count, "rejected", why)
                return
            if time.monotonic() - start + delay > self.max_elapsed:
                self._resolve(count, "retries_exhausted", why)
                return
            with self._cond:  # a backoff that stop() cuts short
                left = self._time_left()
                self._cond.wait(delay if left is None else max(0.0, min(delay, left)))
            delay = min(delay * 2, 5.0)

    def _resolve(self, count: int, reason: str, why: str = "") -> None:
        """The batch in hand was sent (``reason`` empty) or dropped for ``reason``."""
        with self._cond:
            if self._abandoned:  # join() already counted it
                return
            self._pending -= count
            self._cond.notify_all()
        if not reason:
            self.metrics.add("progress.service.tap.exported", count, {"signal": self.signal})
            return
        self._dropped(count, reason)
        if reason == "shutdown":
            with self._cond:
                self._dropped_at_shutdown += count  # one line for all of them, in join()
        else:
            _log.warning("otel-progress: dropping %d %s for %s (%s): %s", count, self.what, self.endpoint,
                         reason.replace("_", " "), why)

    def _dropped(self, count: int, reason: str) -> None:
        self.metrics.add("progress.service.tap.dropped", count, {"signal": self.signal, "reason": reason})

    @abc.abstractmethod
    def _encode(self, batch: list[T]) -> bytes:
        """The request bytes of a batch of queued items."""

    @abc.abstractmethod
    def _forward(self, raw: bytes, timeout: float | None) -> ForwardResult:
        """Send one encoded batch; its outcome."""


class TapExporter(_BatchingTap[tuple[resource_pb2.Resource, trace_pb2.Span]]):
    """Sends annotation spans to an OTLP/gRPC endpoint in batches (see the module)."""

    signal = "traces"
    what = "annotation span(s)"
    thread_name = "otel-progress-tap"
    forwarder: Forwarder

    def submit(self, resource: resource_pb2.Resource, span: trace_pb2.Span) -> bool:
        """Queue one annotation span; False (and counted) when the queue is full."""
        return self._put([(resource, span)]) == 1

    def _encode(self, batch: list[tuple[resource_pb2.Resource, trace_pb2.Span]]) -> bytes:
        return tap_request(batch).SerializeToString()  # type: ignore[no-any-return]

    def _forward(self, raw: bytes, timeout: float | None) -> ForwardResult:
        return self.forwarder.forward_all(raw, timeout)  # split when too large for the endpoint


class LogsTap(_BatchingTap[tuple[bytes, bytes, bytes, bytes]]):
    """Sends detection log records to an OTLP/gRPC endpoint (``LogsService/Export``) in
    batches, each record in its resource and scope (see the module)."""

    signal = "logs"
    what = "detection record(s)"
    thread_name = "otel-progress-logs-tap"
    forwarder: UnaryExporter

    def submit(self, request: Any) -> int:
        """Queue the records of an ``ExportLogsServiceRequest``, or of its slim view
        (:data:`~.otlp.SlimLogsRequest`, whose resources, scopes and records are bytes): the
        findings of one request. Returns how many were queued (the rest are counted as
        dropped)."""
        items = []
        for rl in request.resource_logs:
            resource = _wire(rl.resource)
            for sl in rl.scope_logs:
                scope = _wire(sl.scope)
                key = resource + b"\0" + scope
                items.extend((key, resource, scope, _wire(record)) for record in sl.log_records)
        return self._put(items)

    def _encode(self, batch: list[tuple[bytes, bytes, bytes, bytes]]) -> bytes:
        request = SlimLogsRequest()  # (serialized: the ExportLogsServiceRequest of these parts)
        groups: dict[bytes, Any] = {}
        for key, resource, scope, record in batch:
            sl = groups.get(key)
            if sl is None:
                sl = groups[key] = request.resource_logs.add(resource=resource).scope_logs.add(scope=scope)
            sl.log_records.append(record)
        return request.SerializeToString()  # type: ignore[no-any-return]

    def _forward(self, raw: bytes, timeout: float | None) -> ForwardResult:
        return self.forwarder.forward(raw, timeout)


def _wire(part: Any) -> bytes:
    """A message part as its wire bytes (a slim view holds them already)."""
    return bytes(part) if isinstance(part, (bytes, bytearray)) else part.SerializeToString()  # type: ignore[no-any-return]


class MetricsPusher:
    """Exports the service's metrics over OTLP every ``interval`` seconds (and at stop)."""

    def __init__(self, forwarder: Forwarder, build: Callable[[], bytes], interval: float) -> None:
        self.forwarder = forwarder
        self.build = build
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="otel-progress-metrics", daemon=True)
        self._thread.start()

    def push(self, timeout: float | None = None) -> bool:
        result = self.forwarder.export_metrics(self.build(), timeout)
        if not result.ok:
            _log.debug("otel-progress: metrics export failed: %s %s", result.code.name, result.message)
        return result.ok

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.push()

    def shutdown(self, timeout: float = 2.0) -> None:
        """Stop the periodic export and push once more (within ``timeout`` seconds), so the
        last counts (the tap's drops at shutdown among them) are exported."""
        self._stop.set()
        self._thread.join(timeout)
        self.push(timeout)
