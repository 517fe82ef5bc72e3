"""Can the agent's span exporter send? A real export to the configured OTLP endpoint.

``OTEL_TRACES_EXPORTER=otlp`` (the default) sends to ``localhost:4317`` unless told
otherwise; with nothing listening there the SDK logs a line per batch in the agent's
output and every span, annotations included, is lost, while every setting looks right.
:func:`export_check` runs in the examined interpreter (:mod:`.probe`): it builds the
exporter ``opentelemetry-instrument`` would build there (the same entry point, the same
``OTEL_EXPORTER_OTLP_*`` variables: endpoint, headers, certificates, compression) and
exports an empty batch through it (an ``ExportTraceServiceRequest`` without spans: nothing
appears in the backend), within :data:`EXPORT_CHECK_TIMEOUT_S`. A failure is an ``error`` finding (topic
``export``, :mod:`.checks`) that names the endpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["EXPORT_CHECK_TIMEOUT_S", "export_check", "exporter_entry_point", "otlp_endpoint"]

#: The longest the check waits for the endpoint (the exporter's own retries included).
EXPORT_CHECK_TIMEOUT_S = 5.0

_GRPC = "otlp_proto_grpc"
_HTTP = "otlp_proto_http"


def exporter_entry_point(name: str, signal: str, env: Mapping[str, str]) -> str:
    """The entry point the SDK looks up for an exporter name (``otlp`` is the gRPC one
    unless the OTLP protocol variables say ``http/protobuf``)."""
    if name != "otlp":
        return name
    protocol = str(env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                   or "").strip()
    return _HTTP if protocol.startswith("http") else _GRPC


def otlp_endpoint(entry_point: str, env: Mapping[str, str]) -> str:
    """Where the OTLP span exporter sends, as the SDK reads the variables."""
    own = str(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or "").strip()
    if own:
        return own
    base = str(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip()
    if entry_point == _HTTP:
        return (base.rstrip("/") + "/v1/traces") if base else "http://localhost:4318/v1/traces"
    return base or "http://localhost:4317"


class _Lines(logging.Handler):
    """The exporter's own log lines during the check (its reason for a failure)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(record.getMessage())
        except Exception:  # (a message that cannot be formatted: not ours to fix)
            self.lines.append(str(record.msg))


def _exporter_class(entry_point: str) -> Any:
    from importlib.metadata import entry_points

    for ep in entry_points(group="opentelemetry_traces_exporter"):
        if ep.name == entry_point:
            return ep.load()
    return None


def _reason(lines: list[str], fallback: str) -> str:
    """The exporter's last failure line, else ``fallback``; at most 400 characters."""
    failed = [x for x in lines if "Failed to export" in x or "error" in x.lower()] or lines
    text = (failed[-1] if failed else fallback).strip()
    return text if len(text) <= 400 else text[:397] + "..."


def export_check(env: Mapping[str, str], timeout_s: float = EXPORT_CHECK_TIMEOUT_S) -> dict[str, Any] | None:
    """Export an empty batch through the span exporter configured in ``env`` (which must
    be this process's environment: the exporter reads it). ``None`` when there is nothing
    to check: a traces exporter other than ``otlp``, the SDK disabled, or the exporter
    not installed (its own finding); else ``{exporter, endpoint, ok, error}``."""
    names = [n.strip() for n in str(env.get("OTEL_TRACES_EXPORTER") or "otlp").split(",") if n.strip()]
    if "otlp" not in names or str(env.get("OTEL_SDK_DISABLED", "")).strip().lower() == "true":
        return None
    entry = exporter_entry_point("otlp", "traces", env)
    row: dict[str, Any] = {"exporter": entry, "endpoint": otlp_endpoint(entry, env), "ok": False, "error": ""}
    try:
        cls = _exporter_class(entry)
    except Exception as exc:  # the import fails: the SDK set-up would fail the same way
        row["error"] = f"the exporter cannot be loaded: {type(exc).__name__}: {exc}"
        return row
    if cls is None:
        return None
    lines = _Lines()
    logger = logging.getLogger("opentelemetry.exporter")
    logger.addHandler(lines)
    try:
        try:
            exporter = cls(timeout=timeout_s)
        except TypeError:  # an exporter without the timeout argument
            exporter = cls()
        try:
            result = exporter.export([])
        finally:
            exporter.shutdown()
        row["ok"] = getattr(result, "name", "") == "SUCCESS"
        if not row["ok"]:
            row["error"] = _reason(lines.lines, f"the exporter returned {getattr(result, 'name', result)}")
    except Exception as exc:
        row["error"] = _reason(lines.lines, f"{type(exc).__name__}: {exc}")
    finally:
        logger.removeHandler(lines)
    return row
