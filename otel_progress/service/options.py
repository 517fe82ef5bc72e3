"""Options of ``otel-progress serve``: defaults, environment variables and flags.

Every option has a flag and an environment variable ``OTEL_PROGRESS_SERVE_<NAME>``; a
flag overrides the variable, which overrides the default. The defaults run with no
arguments: listen on loopback 127.0.0.1:4417 and forward to the sink Collector of
collector-config/ on 127.0.0.1:4319. The engine's own settings (thresholds, manifest)
come from ``--config`` / ``OTEL_PROGRESS_CONFIG`` and the ``OTEL_PROGRESS_<KEY>``
variables, as for the other commands.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine.config import SCALAR_TYPES, coerce_scalar
from ..model.evaluation import DETECTION_EVENTS

__all__ = ["ENV_PREFIX", "OPTIONS", "ServiceConfig", "ServiceConfigError", "add_arguments", "from_args"]

ENV_PREFIX = "OTEL_PROGRESS_SERVE_"


class ServiceConfigError(ValueError):
    """An option value that cannot be used; the message names the option and its source."""


@dataclass(frozen=True)
class ServiceConfig:
    """All service options. See docs/service.md for each."""

    mode: str = "inline"
    detection_events: str = "both"
    listen: str = "127.0.0.1:4417"
    forward_endpoint: str = "127.0.0.1:4319"
    forward_timeout: float = 4.0
    forward_probe_interval: float = 2.0
    forward_max_mib: int = 0
    forward_compression: str = "gzip"
    forward_insecure: bool = True
    forward_ca: str = ""
    forward_headers: tuple[tuple[str, str], ...] = ()
    tap_endpoint: str = ""
    metrics_endpoint: str = ""
    metrics_interval: float = 10.0
    health_listen: str = "127.0.0.1:13417"
    health_traces: bool = False
    health_max_connections: int = 256
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    auth_token: str = field(default="", repr=False)
    auth_token_file: str = ""
    max_receive_mib: int = 64
    workers: int = 16
    max_inflight: int = 16
    max_inflight_mib: int = 128
    retry_after: float = 1.0
    max_traces: int = 10_000
    max_spans_per_trace: int = 10_000
    trace_ttl: float = 300.0
    close_delay: float = 30.0
    merge_window: float = 10.0
    batch_cache: int = 4096
    max_state_mib: int = 384
    drain_timeout: float = 10.0
    state_dir: str = ""
    checkpoint_interval: float = 10.0
    checkpoint_max_mib: int = 64
    state_store: str = field(default="", repr=False)  # (may hold a password)
    service_name: str = "otel-progress"
    instance_id: str = ""
    config: str = ""
    log_level: str = "info"

    def __post_init__(self) -> None:
        if self.mode not in ("inline", "tap"):
            raise ServiceConfigError(f"mode: must be 'inline' or 'tap', got {self.mode!r}")
        if self.detection_events not in DETECTION_EVENTS:
            raise ServiceConfigError(f"detection_events: must be one of {', '.join(DETECTION_EVENTS)},"
                                     f" got {self.detection_events!r}")
        if self.forward_compression not in ("gzip", "none"):
            raise ServiceConfigError(
                f"forward_compression: must be 'gzip' or 'none', got {self.forward_compression!r}"
            )
        for name in ("listen", "health_listen"):
            value = getattr(self, name)
            if value and not _is_hostport(value):
                raise ServiceConfigError(f"{name}: expected HOST:PORT, got {value!r}")
        for name in ("forward_endpoint", "tap_endpoint", "metrics_endpoint"):
            value = getattr(self, name)
            if value and not _is_hostport(_strip_scheme(value)):
                raise ServiceConfigError(f"{name}: expected HOST:PORT, got {value!r}")
        if self.mode == "inline" and not self.forward_endpoint:
            raise ServiceConfigError("forward_endpoint: inline mode needs a downstream OTLP/gRPC endpoint")
        for name in ("max_receive_mib", "workers", "max_inflight", "max_traces", "max_spans_per_trace",
                     "max_state_mib", "max_inflight_mib", "health_max_connections"):
            if getattr(self, name) < 1:
                raise ServiceConfigError(f"{name}: must be >= 1, got {getattr(self, name)!r}")
        if self.forward_max_mib < 0:
            raise ServiceConfigError(f"forward_max_mib: must be >= 0, got {self.forward_max_mib!r}")
        if self.batch_cache < 0:
            raise ServiceConfigError(f"batch_cache: must be >= 0, got {self.batch_cache!r}")
        for name in ("forward_timeout", "forward_probe_interval", "metrics_interval", "trace_ttl"):
            if getattr(self, name) <= 0:
                raise ServiceConfigError(f"{name}: must be > 0, got {getattr(self, name)!r}")
        for name in ("retry_after", "close_delay", "merge_window", "drain_timeout"):
            if getattr(self, name) < 0:
                raise ServiceConfigError(f"{name}: must be >= 0, got {getattr(self, name)!r}")
        if self.checkpoint_interval <= 0:
            raise ServiceConfigError(f"checkpoint_interval: must be > 0, got {self.checkpoint_interval!r}")
        if self.checkpoint_max_mib < 1:
            raise ServiceConfigError(f"checkpoint_max_mib: must be >= 1, got {self.checkpoint_max_mib!r}")
        if self.state_store and not self.state_store.startswith(("redis://", "rediss://", "unix://")):
            raise ServiceConfigError("state_store: expected redis://HOST:PORT/DB (or rediss://, unix://),"
                                     f" got {self.state_store.partition('://')[0] or 'no'} scheme")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ServiceConfigError("tls_cert and tls_key: give both (or neither)")
        if self.tls_client_ca and not self.tls_cert:
            raise ServiceConfigError("tls_client_ca: mutual TLS needs tls_cert and tls_key as well")

    @property
    def tap_target(self) -> str:
        """Where tap mode sends findings: ``tap_endpoint``, else ``forward_endpoint``."""
        return self.tap_endpoint or self.forward_endpoint

    def token(self) -> str:
        """The bearer token: ``auth_token``, or the first line of ``auth_token_file``
        (surrounding white space removed). A source that is set but yields no token (a
        blank ``auth_token``, an empty file or one whose first line is blank, as an empty
        Kubernetes secret key gives) raises :class:`ServiceConfigError`: the service must
        not start without the authentication it was asked for."""
        if self.auth_token:
            if not self.auth_token.strip():
                raise ServiceConfigError("auth_token: is blank (white space only); give the token, or leave it"
                                         " unset for no authentication")
            return self.auth_token.strip()
        if not self.auth_token_file:
            return ""
        path = self.auth_token_file
        try:
            with open(path, "rb") as fh:
                first = fh.readline(64 * 1024)
        except OSError as exc:
            raise ServiceConfigError(f"auth_token_file: cannot read {path}: {exc.strerror or exc}") from exc
        try:
            token = first.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise ServiceConfigError(f"auth_token_file: the first line of {path} is not UTF-8 text ({exc.reason}"
                                     f" at byte {exc.start})") from exc
        if not token:
            why = "is empty" if not first else "has a blank first line (the token must be on the first line)"
            raise ServiceConfigError(f"auth_token_file: {path} {why}; refusing to start without authentication")
        return token


def _strip_scheme(value: str) -> str:
    for scheme in ("http://", "https://", "grpc://", "dns:///"):
        if value.startswith(scheme):
            return value[len(scheme):]
    return value


def _is_hostport(value: str) -> bool:
    host, sep, port = value.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 <= int(port) < 65536)


@dataclass(frozen=True)
class _Opt:
    name: str
    help: str
    metavar: str = ""
    choices: tuple[str, ...] = ()


#: Every option: field name, help text. Flag: ``--name-with-dashes``; env: OTEL_PROGRESS_SERVE_NAME.
OPTIONS: tuple[_Opt, ...] = (
    _Opt("mode", "inline: annotate spans and forward them (default); tap: receive a copy, forward"
         " nothing, send findings as annotation spans and metrics", choices=("inline", "tap")),
    _Opt("detection_events", "how detections are written: both (default): on the spans (events and"
         " attributes; annotation spans in tap mode) or, for coding agents' log input, on the offending record"
         " with a progress.* detection record; and as gen_ai.evaluation.result log records in the span's"
         " context (LogsService/Export to the forward endpoint, or the tap endpoint); span: the former only;"
         " log: the evaluation records only", choices=DETECTION_EVENTS),
    _Opt("listen", "OTLP/gRPC listen address (default 127.0.0.1:4417)", "HOST:PORT"),
    _Opt("forward_endpoint", "inline mode: downstream OTLP/gRPC endpoint (default 127.0.0.1:4319)",
         "HOST:PORT"),
    _Opt("forward_timeout", "seconds for one forward; keep below the Collector's exporter timeout"
         " (default 4)", "SECONDS"),
    _Opt("forward_probe_interval", "inline mode: seconds without a forward after which the downstream is probed"
         " (a connection, and an empty Export request while it is marked unreachable), at start"
         " and then all along; /readyz answers 503 while it is unreachable (default 2)", "SECONDS"),
    _Opt("forward_max_mib", "largest request forwarded, MiB; a larger one (after annotation) is split into"
         " several (default 0: no limit of its own, a request is split only when the downstream answers"
         " RESOURCE_EXHAUSTED without RetryInfo, as gRPC does for a message over its limit)", "MIB"),
    _Opt("forward_compression", "gzip (default) or none", choices=("gzip", "none")),
    _Opt("forward_insecure", "plaintext to the downstream endpoint (default true; false: TLS)", "BOOL"),
    _Opt("forward_ca", "CA bundle to verify the downstream (and tap/metrics) endpoint's TLS certificate",
         "FILE"),
    _Opt("forward_headers", "gRPC metadata for forwards and tap exports, KEY=VALUE,KEY=VALUE", "LIST"),
    _Opt("tap_endpoint", "tap mode: OTLP/gRPC endpoint for annotation spans and metrics"
         " (default: the forward endpoint)", "HOST:PORT"),
    _Opt("metrics_endpoint", "OTLP/gRPC endpoint for the service's metrics (default: none in inline mode,"
         " the tap endpoint in tap mode)", "HOST:PORT"),
    _Opt("metrics_interval", "seconds between OTLP metric exports (default 10)", "SECONDS"),
    _Opt("health_listen", "HTTP address of /healthz, /readyz, /metrics and /traces (default"
         " 127.0.0.1:13417; empty: off)", "HOST:PORT"),
    _Opt("health_traces", "serve /traces (the trace ids held) on the health port (default false); with"
         " --auth-token it requires the bearer token", "BOOL"),
    _Opt("health_max_connections", "health-port connections open at once (one thread serves them all); at the"
         " limit a new connection closes the oldest one that has not sent its request yet, and a connection"
         " that sends none within 5 s is closed, so idle connections cannot make /healthz fail (default 256)",
         "N"),
    _Opt("tls_cert", "server TLS certificate (PEM)", "FILE"),
    _Opt("tls_key", "server TLS private key (PEM)", "FILE"),
    _Opt("tls_client_ca", "CA bundle for client certificates: enables and requires mutual TLS", "FILE"),
    _Opt("auth_token", "require 'authorization: Bearer TOKEN' on every request", "TOKEN"),
    _Opt("auth_token_file", "read the bearer token from this file's first line, at start-up; an empty file or"
         " a blank first line is an error", "FILE"),
    _Opt("max_receive_mib", "largest request accepted, MiB (default 64)", "MIB"),
    _Opt("workers", "gRPC worker threads that handle requests (default 16; at least max_inflight are used,"
         " plus 4 that only answer refusals)", "N"),
    _Opt("max_inflight", "requests handled at once; beyond, UNAVAILABLE with RetryInfo at once (default 16)", "N"),
    _Opt("max_inflight_mib", "request bytes handled at once, MiB; a request beyond (unless it is the only one)"
         " is answered UNAVAILABLE with RetryInfo (default 128)", "MIB"),
    _Opt("retry_after", "retry delay suggested in RetryInfo, seconds (default 1)", "SECONDS"),
    _Opt("max_traces", "traces held in state; the least recently used is evicted first (default 10000)", "N"),
    _Opt("max_spans_per_trace", "spans remembered per trace for lineage and retries (default 10000)", "N"),
    _Opt("trace_ttl", "seconds a trace without new spans is kept (default 300)", "SECONDS"),
    _Opt("close_delay", "seconds a trace is kept after its root span arrived (default 30)", "SECONDS"),
    _Opt("merge_window", "seconds a trace's spans are held after its latest span, so that a late span of it"
         " is merged and the trace analysed again whole (default 10; 0: late spans are replayed as they come)",
         "SECONDS"),
    _Opt("max_state_mib", "memory budget of the state held (traces, runs, lineage), MiB, as estimated;"
         " beyond it the least recently used traces are evicted (default 384: fits the 1 GiB limit of"
         " collector-config/k8s)", "MIB"),
    _Opt("batch_cache", "digests of answered requests remembered, for retries (default 4096; 0: off)", "N"),
    _Opt("drain_timeout", "seconds to drain on SIGTERM/SIGINT: finish requests in flight, then send the tap"
         " findings queued (what is left is dropped, counted and logged) (default 10)", "SECONDS"),
    _Opt("state_dir", "directory of this replica's checkpoint of its open runs (engine state, escalation"
         " level, what was reported), written after the SIGTERM/SIGINT drain and every --checkpoint-interval"
         " seconds, read back on start; one directory per replica (a StatefulSet volume) (default: none, state"
         " in memory only)", "DIR"),
    _Opt("checkpoint_interval", "seconds between checkpoints in --state-dir (default 10)", "SECONDS"),
    _Opt("checkpoint_max_mib", "largest checkpoint, MiB: the most recently used traces are written first,"
         " the rest left out (default 64)", "MIB"),
    _Opt("state_store", "Redis/Valkey URL (redis://HOST:PORT/DB) where the replicas share the state of"
         " their open runs, so that the replica a trace moves to continues it (needs the 'store' extra)"
         " (default: none)", "URL"),
    _Opt("service_name", "service.name of the service's own telemetry (default otel-progress)", "NAME"),
    _Opt("instance_id", "service.instance.id of the service's own telemetry (default: host:pid)", "ID"),
    _Opt("config", "engine config file (JSON/YAML), as OTEL_PROGRESS_CONFIG", "FILE"),
    _Opt("log_level", "debug, info, warning or error (default info)",
         choices=("debug", "info", "warning", "error")),
)

_FIELDS = {f.name: f for f in dataclasses.fields(ServiceConfig)}


def env_var(name: str) -> str:
    """The environment variable of an option."""
    return ENV_PREFIX + name.upper()


def _coerce(name: str, value: Any, source: str) -> Any:
    default = _FIELDS[name].default
    try:
        if isinstance(default, SCALAR_TYPES):
            return coerce_scalar(default, value)
        if name == "forward_headers":
            if isinstance(value, tuple):
                return value
            pairs = []
            for item in str(value).split(","):
                if not item.strip():
                    continue
                key, sep, val = item.partition("=")
                if not sep or not key.strip():
                    raise ValueError(f"expected KEY=VALUE, got {item!r}")
                pairs.append((key.strip().lower(), val.strip()))
            return tuple(pairs)
        return str(value)
    except (TypeError, ValueError) as exc:
        raise ServiceConfigError(f"{source}: cannot use {value!r}: {exc}") from exc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every option as a flag (default None: the environment or the default applies)."""
    for opt in OPTIONS:
        flag = "--" + opt.name.replace("_", "-")
        shown = "" if opt.name == "auth_token" else f" [env {env_var(opt.name)}]"
        kwargs: dict[str, Any] = {"dest": opt.name, "default": None, "help": opt.help + shown}
        if opt.choices:
            kwargs["choices"] = opt.choices
        if opt.metavar:
            kwargs["metavar"] = opt.metavar
        if opt.name == "auth_token":
            kwargs["help"] = opt.help + f" [env {env_var(opt.name)}; prefer the variable or a file]"
        parser.add_argument(flag, **kwargs)


def from_args(args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None,
              **overrides: Any) -> ServiceConfig:
    """Build the options: defaults < environment < flags < ``overrides``."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name in _FIELDS:
        var = env_var(name)
        if env.get(var, "") != "":
            values[name] = _coerce(name, env[var], var)
        flag_value = getattr(args, name, None) if args is not None else None
        if flag_value is not None:
            values[name] = _coerce(name, flag_value, "--" + name.replace("_", "-"))
    for name, value in overrides.items():
        if name not in _FIELDS:
            raise ServiceConfigError(f"unknown option {name!r}")
        values[name] = _coerce(name, value, name)
    try:
        return ServiceConfig(**values)
    except ServiceConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ServiceConfigError(str(exc)) from exc


def describe(options: Sequence[_Opt] = OPTIONS) -> list[tuple[str, str, str, str]]:
    """``(flag, env var, default, help)`` per option (used by docs and tests)."""
    rows = []
    for opt in options:
        default = _FIELDS[opt.name].default
        rows.append(("--" + opt.name.replace("_", "-"), env_var(opt.name), repr(default), opt.help))
    return rows
