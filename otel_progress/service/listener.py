"""The gRPC listener: grpcio's server with ``TraceService/Export`` and ``LogsService/Export``
registered with raw-bytes request deserializers (so that a batch that gains no annotation
is forwarded as the exact bytes received), its thread pool and message limits, TLS (and
client certificates) when configured, bound to the listen address.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

from .logs import ExportLogsServiceResponse
from .options import ServiceConfig, ServiceConfigError
from .otlp import ExportTraceServiceResponse
from .rpc import TraceExportServicer

__all__ = ["bind_server"]

_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
_LOGS_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"
_REFUSERS = 4  # worker threads beyond max_inflight: they only answer refusals, so none queues

Export = Callable[[Any, grpc.ServicerContext], Any]


def bind_server(cfg: ServiceConfig, export_traces: Export, export_logs: Export) -> tuple[grpc.Server, int]:
    """A gRPC server serving the two Export methods, bound to ``cfg.listen`` but not
    started, and the bound port. Raises :class:`.options.ServiceConfigError` when the
    TLS files cannot be read or the address cannot be listened on."""
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
    servicer = TraceExportServicer(export_traces)
    handler = grpc.method_handlers_generic_handler(_SERVICE, {
        "Export": grpc.unary_unary_rpc_method_handler(
            servicer.Export,
            request_deserializer=None,  # raw bytes: forwarded unchanged when not annotated
            response_serializer=ExportTraceServiceResponse.SerializeToString,
        ),
    })
    logs_handler = grpc.method_handlers_generic_handler(_LOGS_SERVICE, {
        "Export": grpc.unary_unary_rpc_method_handler(
            export_logs,
            request_deserializer=None,
            response_serializer=ExportLogsServiceResponse.SerializeToString,
        ),
    })
    server.add_generic_rpc_handlers((handler, logs_handler))
    return server, _bind(server, cfg)


def _bind(server: grpc.Server, cfg: ServiceConfig) -> int:
    try:
        if cfg.tls_cert:
            port = server.add_secure_port(cfg.listen, _credentials(cfg))
        else:
            port = server.add_insecure_port(cfg.listen)
    except OSError as exc:
        raise ServiceConfigError(f"cannot read TLS files: {exc}") from exc
    except RuntimeError as exc:
        raise ServiceConfigError(f"cannot listen on {cfg.listen}: {exc}") from exc
    if not port:
        raise ServiceConfigError(f"cannot listen on {cfg.listen} (address in use or not local?)")
    return port


def _credentials(cfg: ServiceConfig) -> grpc.ServerCredentials:
    """The server's certificate and key, and the client CA when client certificates are
    required (mTLS)."""
    with open(cfg.tls_cert, "rb") as fh:
        cert = fh.read()
    with open(cfg.tls_key, "rb") as fh:
        key = fh.read()
    client_ca = None
    if cfg.tls_client_ca:
        with open(cfg.tls_client_ca, "rb") as fh:
            client_ca = fh.read()
    return grpc.ssl_server_credentials(((key, cert),), root_certificates=client_ca,
                                       require_client_auth=client_ca is not None)
