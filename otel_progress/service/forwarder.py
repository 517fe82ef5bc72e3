"""Forwarding OTLP/gRPC requests downstream, as the bytes they are.

The forwarder sends the request bytes unchanged (a batch that gained no annotation is
never re-serialised), with a deadline, and tells the caller what to answer upstream:
success (with the downstream's partial success, if any), or a failure that must become a
retryable UNAVAILABLE (anything but the downstream's own INVALID_ARGUMENT verdict on
the data).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from .otlp import EXPORT_METHOD, ExportTraceServiceResponse

__all__ = ["ForwardResult", "Forwarder", "channel_for"]

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
    ok: bool
    code: grpc.StatusCode = grpc.StatusCode.OK
    message: str = ""
    response: ExportTraceServiceResponse | None = None

    @property
    def permanent(self) -> bool:
        """The downstream rejected the data itself (INVALID_ARGUMENT): retrying cannot help."""
        return self.code is grpc.StatusCode.INVALID_ARGUMENT


class Forwarder:
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
        self.endpoint = endpoint
        self.timeout = timeout
        self.compression = grpc.Compression.Gzip if compression == "gzip" else grpc.Compression.NoCompression
        self.headers = tuple(headers)
        self._channel = channel_for(endpoint, insecure=insecure, ca_file=ca_file, max_message_mib=max_message_mib)
        self._export = self._channel.unary_unary(
            EXPORT_METHOD, request_serializer=_identity,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )
        self._metrics = self._channel.unary_unary(
            _METRICS_METHOD, request_serializer=_identity, response_deserializer=_identity,
        )
        self._closed = threading.Event()

    def forward(self, raw: bytes, timeout: float | None = None) -> ForwardResult:
        """Send the bytes; never raises."""
        deadline = self.timeout if timeout is None else max(0.05, min(self.timeout, timeout))
        try:
            response = self._export(raw, timeout=deadline, metadata=self.headers or None,
                                    compression=self.compression)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
            details = exc.details() if hasattr(exc, "details") else str(exc)
            return ForwardResult(False, code or grpc.StatusCode.UNKNOWN, details or "")
        except Exception as exc:  # e.g. the channel was closed during shutdown
            return ForwardResult(False, grpc.StatusCode.UNAVAILABLE, f"forward failed: {exc}")
        return ForwardResult(True, grpc.StatusCode.OK, "", response)

    def export_metrics(self, raw: bytes, timeout: float | None = None) -> ForwardResult:
        """Send an ``ExportMetricsServiceRequest``'s bytes; never raises."""
        try:
            self._metrics(raw, timeout=timeout or self.timeout, metadata=self.headers or None,
                          compression=self.compression)
        except grpc.RpcError as exc:
            return ForwardResult(False, exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN,
                                 exc.details() if hasattr(exc, "details") else str(exc))
        except Exception as exc:
            return ForwardResult(False, grpc.StatusCode.UNAVAILABLE, str(exc))
        return ForwardResult(True)

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._channel.close()
