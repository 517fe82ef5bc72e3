"""The start-up message of ``otel-progress serve``: where it listens, what it does with
the data and where it sends it (printed to stderr by :func:`.run.run_serve`)."""

from __future__ import annotations

from ..model.version import __version__
from .options import ServiceConfig

__all__ = ["redact_url", "startup_message"]


def startup_message(cfg: ServiceConfig, *, port: int, token_required: bool, run_ttl: float,
                    metrics_endpoint: str | None, health_port: int | None) -> str:
    """The message for a service started with ``cfg``: listening on ``port``, pushing its
    metrics to ``metrics_endpoint`` (None: not pushed), serving health on ``health_port``
    (None: no health server); log runs end ``run_ttl`` seconds after their last record."""
    host = cfg.listen.rpartition(":")[0]
    listen = f"{host}:{port}"
    security = "TLS" + (" + client certificates (mTLS)" if cfg.tls_client_ca else "") if cfg.tls_cert \
        else "plaintext"
    auth = "bearer token required" if token_required else "no authentication"
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
                 f" a run ends {run_ttl:g}s after its last record")
    in_logs = {"both": "the offending record annotated, a progress.* detection record and a"
                       " gen_ai.evaluation.result record",
               "span": "the offending record annotated and a progress.* detection record",
               "log": "a gen_ai.evaluation.result record only (the records left as received)"}
    lines.append(f"  detections in logs: {in_logs[cfg.detection_events]}"
                 f"{' (to the tap endpoint)' if cfg.mode == 'tap' else ''}")
    if metrics_endpoint is not None:
        lines.append(f"  metrics: OTLP to {metrics_endpoint} every {cfg.metrics_interval:g}s")
    if health_port is not None:
        hhost = cfg.health_listen.rpartition(":")[0]
        traces = (" /traces" + (" (bearer token)" if token_required else "")) if cfg.health_traces else ""
        lines.append(f"  health: http://{hhost}:{health_port}/healthz /readyz /metrics{traces}")
    lines.append(f"  state: at most {cfg.max_traces} traces and {cfg.max_state_mib} MiB,"
                 f" idle TTL {cfg.trace_ttl:g}s,"
                 f" closed {cfg.close_delay:g}s after the root span")
    if cfg.state_dir:
        lines.append(f"  run state: checkpoint in {cfg.state_dir} on SIGTERM/SIGINT and every"
                     f" {cfg.checkpoint_interval:g}s (at most {cfg.checkpoint_max_mib} MiB), read back on start")
    if cfg.state_store:
        lines.append(f"  run state: shared with the other replicas in {redact_url(cfg.state_store)}"
                     " (written after each batch, read for traces another replica continued)")
    return "\n".join(lines)


def redact_url(url: str) -> str:
    """``url`` with its password (``scheme://user:password@host``) replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not sep or not at:
        return url
    user, colon, _password = creds.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{host}"
