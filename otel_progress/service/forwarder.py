"""Forwarding OTLP/gRPC requests downstream, as the bytes they are.

The forwarder sends the request bytes unchanged (a batch that gained no annotation is
never re-serialised), with a deadline, and tells the caller what the downstream answered:
success (with its partial success, if any), or a failure that is either *retryable* or
*permanent*, decided as the Collector's OTLP exporter decides it (exporter/otlpexporter,
``shouldRetry``): CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE and
DATA_LOSS are retryable, RESOURCE_EXHAUSTED only with a ``google.rpc.RetryInfo``; every
other code is permanent (retrying the same bytes cannot help).

:meth:`Forwarder.forward_all` also splits a request that is larger than the downstream
accepts (``max_bytes``, or a RESOURCE_EXHAUSTED answer without RetryInfo, which is what
gRPC answers to a message over its size limit) into smaller requests.

:meth:`UnaryExporter.connect` tells whether the channel connects, without sending anything
(readiness probes it: :mod:`.downstream`); every channel tries to reconnect at most
:data:`MAX_RECONNECT_BACKOFF` seconds apart, so a downstream that comes back after a long
outage is used (and seen reachable) within seconds, not gRPC's default two minutes.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from .otlp import EXPORT_METHOD, ExportTraceServiceResponse, SlimRequest, retry_delay_of

__all__ = ["MAX_RECONNECT_BACKOFF", "RETRYABLE", "ForwardResult", "Forwarder", "UnaryExporter", "channel_for",
           "split_request"]

#: Downstream codes a batch is retried for (the Collector's OTLP exporter retries these;
#: RESOURCE_EXHAUSTED too, but only when it carries RetryInfo).
RETRYABLE = frozenset({
    grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED,
    grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS,
})
#: Longest wait between two reconnection attempts of a channel, seconds (gRPC's default: 120).
MAX_RECONNECT_BACKOFF = 2.0
_MAX_SPLITS = 64  # pieces one request may be split into after RESOURCE_EXHAUSTED answers

_log = logging.getLogger(__name__)

_METRICS_METHOD = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"


def _identity(b: bytes) -> bytes:
    return b


def channel_for(endpoint: str, *, insecure: bool = True, ca_file: str = "",
                max_message_mib: int = 64) -> grpc.Channel:
    """A gRPC channel to an OTLP endpoint (plaintext, or TLS verified with ``ca_file`` or the
    system roots)."""
    target = endpoint
    for scheme in ("http://", "https://", "grpc://"):
        if target.startswith(scheme):
            target = target[len(scheme):]
    options = [
        ("grpc.max_send_message_length", max_message_mib * 1024 * 1024),
        ("grpc.max_receive_message_length", 16 * 1024 * 1024),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.enable_retries", 0),
        ("grpc.initial_reconnect_backoff_ms", 1000),
        ("grpc.max_reconnect_backoff_ms", int(MAX_RECONNECT_BACKOFF * 1000)),
    ]
    if insecure and not endpoint.startswith("https://"):
        return grpc.insecure_channel(target, options=options)
    root = None
    if ca_file:
        with open(ca_file, "rb") as fh:
            root = fh.read()
    return grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=root), options=options)


@dataclass(frozen=True)
class ForwardResult:
    """What the downstream answered: ``ok``, else the gRPC ``code``, its message and the
    delay of its RetryInfo (None: it sent none)."""

    ok: bool
    code: grpc.StatusCode = grpc.StatusCode.OK
    message: str = ""
    response: ExportTraceServiceResponse | None = None
    retry_delay: float | None = None
    pieces: int = 1  # requests it was sent as (see Forwarder.forward_all)

    @property
    def retryable(self) -> bool:
        """Whether sending the batch again may succeed (the Collector's rule, see the module)."""
        if self.ok:
            return False
        if self.code is grpc.StatusCode.RESOURCE_EXHAUSTED:
            return self.retry_delay is not None
        return self.code in RETRYABLE

    @property
    def permanent(self) -> bool:
        """A failure that retrying the same batch cannot cure: reported, counted, not retried."""
        return not self.ok and not self.retryable

    @property
    def too_large(self) -> bool:
        """RESOURCE_EXHAUSTED without RetryInfo: what gRPC answers to a message over its limit."""
        return self.code is grpc.StatusCode.RESOURCE_EXHAUSTED and self.retry_delay is None


def split_request(raw: bytes, max_bytes: int) -> list[bytes]:
    """The request as several requests of at most about ``max_bytes`` each (at least one
    span each; a single span larger than that is a request of its own). Each keeps the
    resource and scope of its spans. Read slim: no span is decoded (each piece holds the
    spans' bytes as they came)."""
    request = SlimRequest.FromString(raw)
    pieces: list[Any] = []
    current = SlimRequest()
    size = 0
    for rs in request.resource_spans:
        head = len(rs.resource) + len(rs.schema_url) + 16
        for ss in rs.scope_spans:
            scope_head = len(ss.scope) + len(ss.schema_url) + 16
            target = None
            for span in ss.spans:
                n = len(span) + 8
                if target is None or size + n > max_bytes:
                    if size and size + n + head + scope_head > max_bytes:
                        pieces.append(current)
                        current = SlimRequest()
                        size = 0
                    out_rs = current.resource_spans.add(resource=rs.resource, schema_url=rs.schema_url)
                    target = out_rs.scope_spans.add(scope=ss.scope, schema_url=ss.schema_url)
                    size += head + scope_head
                target.spans.append(span)
                size += n
    if size or not pieces:
        pieces.append(current)
    return [p.SerializeToString() for p in pieces]


def _span_count(raw: bytes) -> int:
    try:
        request = SlimRequest.FromString(raw)
    except Exception:
        return 0
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


def _failure(exc: grpc.RpcError) -> ForwardResult:
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = exc.details() if hasattr(exc, "details") else str(exc)
    delay = None
    try:
        for key, value in (exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None) or ():
            if key == "grpc-status-details-bin" and isinstance(value, bytes):
                delay = retry_delay_of(value)
    except Exception:  # no trailers to read
        delay = None
    return ForwardResult(False, code or grpc.StatusCode.UNKNOWN, details or "", None, delay)


class UnaryExporter:
    """Sends raw request bytes to one unary OTLP/gRPC export method (``method``) of one
    endpoint, answers read with ``response_type``: what :class:`Forwarder` (traces) and the
    logs forwarder share."""

    def __init__(
        self,
        endpoint: str,
        method: str,
        response_type: Any,
        *,
        timeout: float = 4.0,
        compression: str = "gzip",
        insecure: bool = True,
        ca_file: str = "",
        headers: Sequence[tuple[str, str]] = (),
        max_message_mib: int = 64,
    ) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.compression = grpc.Compression.Gzip if compression == "gzip" else grpc.Compression.NoCompression
        self.headers = tuple(headers)
        self._channel = channel_for(endpoint, insecure=insecure, ca_file=ca_file, max_message_mib=max_message_mib)
        self._export = self._channel.unary_unary(
            method, request_serializer=_identity, response_deserializer=response_type.FromString,
        )

    def forward(self, raw: bytes, timeout: float | None = None) -> ForwardResult:
        """Send the bytes; never raises."""
        deadline = self.timeout if timeout is None else max(0.05, min(self.timeout, timeout))
        try:
            response = self._export(raw, timeout=deadline, metadata=self.headers or None,
                                    compression=self.compression)
        except grpc.RpcError as exc:
            return _failure(exc)
        except Exception as exc:  # e.g. the channel was closed during shutdown
            return ForwardResult(False, grpc.StatusCode.UNAVAILABLE, f"forward failed: {exc}")
        return ForwardResult(True, grpc.StatusCode.OK, "", response)

    def connect(self, timeout: float) -> tuple[bool, str]:
        """Whether the channel is connected, or connects within ``timeout`` seconds (a
        connection attempt is started if none is under way); sends no request. ``(False,
        why)`` as soon as an attempt fails. Never raises."""
        settled = threading.Event()
        states: list[grpc.ChannelConnectivity] = []

        def seen(state: grpc.ChannelConnectivity) -> None:
            states.append(state)
            if state in _SETTLED:
                settled.set()

        try:
            self._channel.subscribe(seen, try_to_connect=True)
        except Exception as exc:  # e.g. closed during shutdown
            return False, f"cannot connect: {exc}"
        try:
            settled.wait(timeout)
        finally:
            with contextlib.suppress(Exception):  # (already gone)
                self._channel.unsubscribe(seen)
        last = states[-1] if states else None
        if last is grpc.ChannelConnectivity.READY:
            return True, ""
        if last is grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            return False, "cannot connect (connection failed)"
        return False, f"cannot connect within {timeout:g}s ({last.name.lower() if last else 'no state'})"

    def close(self) -> None:
        self._channel.close()


_SETTLED = frozenset({grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.TRANSIENT_FAILURE,
                      grpc.ChannelConnectivity.SHUTDOWN})


class Forwarder(UnaryExporter):
    """Sends raw ``ExportTraceServiceRequest`` bytes to one OTLP/gRPC endpoint."""

    def __init__(
        self,
        endpoint: str,
        *,
        timeout: float = 4.0,
        compression: str = "gzip",
        insecure: bool = True,
        ca_file: str = "",
        headers: Sequence[tuple[str, str]] = (),
        max_message_mib: int = 64,
    ) -> None:
        super().__init__(endpoint, EXPORT_METHOD, ExportTraceServiceResponse, timeout=timeout,
                         compression=compression, insecure=insecure, ca_file=ca_file, headers=headers,
                         max_message_mib=max_message_mib)
        self._metrics = self._channel.unary_unary(
            _METRICS_METHOD, request_serializer=_identity, response_deserializer=_identity,
        )
        self._closed = threading.Event()

    def forward_all(self, raw: bytes, timeout: float | None = None, max_bytes: int = 0) -> ForwardResult:
        """Send the bytes as one request, or as several when they are larger than
        ``max_bytes`` (0: no limit) or the downstream answers RESOURCE_EXHAUSTED without
        RetryInfo (each piece is then halved, up to 64 pieces in all). Succeeds when every
        piece was accepted (their partial successes are added up); otherwise answers the
        first failure. Never raises."""
        budget = self.timeout if timeout is None else max(0.05, min(self.timeout, timeout))
        deadline = time.monotonic() + budget
        try:
            todo = split_request(raw, max_bytes) if max_bytes and len(raw) > max_bytes else [raw]
        except Exception:  # not parseable here: send it as it is, the downstream decides
            todo = [raw]
        sent = 0
        rejected = 0
        messages: list[str] = []
        while todo:
            piece = todo.pop(0)
            left = deadline - time.monotonic()
            if sent and left < 0.05:  # out of time between pieces: the sender retries the batch
                return ForwardResult(False, grpc.StatusCode.DEADLINE_EXCEEDED,
                                     f"timeout after {sent} of {sent + len(todo) + 1} pieces", None, None, sent)
            result = self.forward(piece, max(0.05, left))
            if result.too_large and len(todo) + sent + 2 <= _MAX_SPLITS and _span_count(piece) > 1:
                halves = split_request(piece, max(1, len(piece) // 2))
                if len(halves) > 1:
                    todo[:0] = halves
                    continue
            if not result.ok:
                return ForwardResult(False, result.code, result.message, None, result.retry_delay, sent + 1)
            sent += 1
            partial = result.response.partial_success if result.response is not None else None
            if partial is not None and (partial.rejected_spans or partial.error_message):
                rejected += partial.rejected_spans
                if partial.error_message:
                    messages.append(partial.error_message)
        if sent == 1 and len(messages) <= 1 and rejected == 0:
            return ForwardResult(True, pieces=1, response=result.response)
        response = ExportTraceServiceResponse()
        if rejected or messages:
            response.partial_success.rejected_spans = rejected
            response.partial_success.error_message = "; ".join(messages)[:1024]
        return ForwardResult(True, response=response, pieces=sent)

    def export_metrics(self, raw: bytes, timeout: float | None = None) -> ForwardResult:
        """Send an ``ExportMetricsServiceRequest``'s bytes; never raises."""
        try:
            self._metrics(raw, timeout=timeout or self.timeout, metadata=self.headers or None,
                          compression=self.compression)
        except grpc.RpcError as exc:
            return _failure(exc)
        except Exception as exc:
            return ForwardResult(False, grpc.StatusCode.UNAVAILABLE, str(exc))
        return ForwardResult(True)

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._channel.close()
