"""The watcher inside a run of ``otel-progress doctor -- COMMAND``.

The doctor runs the command under ``opentelemetry-instrument`` with
``OTEL_PROGRESS_ON_DETECTION=otel_progress.doctor.watch:on_detection``: when the progress
instrumentor loads that hook it imports this module, which adds a span processor to the
SDK tracer provider (before the progress processor wraps the provider's processors, so it
sees the spans as the exporter does) and writes what it saw, as JSON, to the file named
by :data:`ENV_REPORT` when the process exits (without that variable, importing it does
nothing). A hook the user had set
(:data:`ENV_CHAINED_HOOK`) is still called. Nothing here may raise into the application.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import threading
from collections import Counter
from typing import Any

from ._names import ENV_CHAINED_HOOK, ENV_REPORT, HOOK

__all__ = ["ENV_CHAINED_HOOK", "ENV_REPORT", "HOOK", "on_detection"]

_MAX_TOOL_SPANS = 500
_MARKERS = ("gen_ai.operation.name", "openinference.span.kind", "traceloop.span.kind", "mcp.method.name")
_log = logging.getLogger("otel_progress.doctor")


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.spans = 0
        self.kinds: Counter[str] = Counter()
        self.scopes: Counter[str] = Counter()
        self.tool_spans: list[dict[str, Any]] = []
        self.tool_count = 0
        self.with_arguments = 0
        self.with_result = 0
        self.annotated = 0
        self.model_count = 0  # inference spans
        self.model_with_output = 0  # of them, those whose output (text, reasoning, requests) was captured
        self.model_bare: dict[str, Any] | None = None  # the first inference span without output
        self.detections: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.export_failures = 0  # the exporters' "Failed to export" lines in the run
        self.export_errors: list[str] = []  # the first few, as the exporters said them
        self.chained: Any = None


_STATE = _State()


def _record(span: Any) -> None:
    from opentelemetry.trace import StatusCode

    from ..conventions import read_model_output
    from ..conventions.spans import SpanKind, SpanRecord, classify, read_tool_call
    from ..model import NOT_CAPTURED
    from .grouping import ungrouped_fields

    ctx = span.context
    parent = span.parent
    attrs = dict(span.attributes or {})
    rec = SpanRecord(
        trace_id=format(ctx.trace_id, "032x"), span_id=format(ctx.span_id, "016x"),
        parent_id=format(parent.span_id, "016x") if parent is not None else "",
        name=span.name, start_ns=span.start_time or 0, end_ns=span.end_time or 0, attributes=attrs,
        error=span.status.status_code is StatusCode.ERROR, status_message=span.status.description or "",
        events=tuple((e.name, dict(e.attributes or {})) for e in span.events),
    )
    kind = classify(rec)
    scope = getattr(getattr(span, "instrumentation_scope", None), "name", "") or ""
    with _STATE.lock:
        _STATE.spans += 1
        _STATE.kinds[kind.value] += 1
        _STATE.scopes[scope] += 1
    if kind is SpanKind.MODEL:
        output = read_model_output(rec)
        captured = output is not None and output.captured
        with _STATE.lock:
            _STATE.model_count += 1
            _STATE.model_with_output += captured
            if not captured and _STATE.model_bare is None:
                _STATE.model_bare = {"name": span.name, "scope": scope,
                                     "markers": {k: str(attrs[k]) for k in _MARKERS if k in attrs}}
        return
    if kind is not SpanKind.TOOL:
        return
    call = read_tool_call(rec)
    has_args = call.arguments is not NOT_CAPTURED and call.arguments not in (None, "", {})
    has_result = call.result is not NOT_CAPTURED
    events = [e.name for e in span.events if e.name in ("no_progress", "livelock")]
    annotated = bool(events) or bool(attrs.get("progress.detected"))
    row = {"name": span.name, "tool": call.name, "scope": scope, "arguments": has_args, "result": has_result,
           "error": call.error, "detections": events, "trace_id": rec.trace_id, "span_id": rec.span_id,
           "markers": {k: str(attrs[k]) for k in _MARKERS if k in attrs},
           "attribute_keys": sorted(attrs)[:60], **ungrouped_fields(rec)}
    with _STATE.lock:
        _STATE.tool_count += 1
        _STATE.with_arguments += has_args
        _STATE.with_result += has_result
        _STATE.annotated += annotated
        if len(_STATE.tool_spans) < _MAX_TOOL_SPANS:
            _STATE.tool_spans.append(row)


class _Watcher:
    """A span processor that only looks (the SDK's ``SpanProcessor`` interface)."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        return None

    def _on_ending(self, span: Any) -> None:
        return None

    def on_end(self, span: Any) -> None:
        try:
            _record(span)
        except Exception as exc:
            with _STATE.lock:
                if len(_STATE.errors) < 20:
                    _STATE.errors.append(f"reading span {getattr(span, 'name', '?')!r}: {type(exc).__name__}: {exc}")

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class _ExportFailures(logging.Handler):
    """The OTLP exporters' own failure lines in the run (logger ``opentelemetry.exporter``:
    ``Failed to export traces to localhost:4317, error code: StatusCode.UNAVAILABLE ...``,
    ``Failed to export span batch code: 401 ...``): each is a batch the backend never got.
    Their retries (``Transient error ...``) are not counted."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        self._as_without_us(record)
        try:
            message = record.getMessage()
        except Exception:
            return
        if not message.startswith("Failed to export"):
            return
        with _STATE.lock:
            _STATE.export_failures += 1
            text = message if len(message) <= 400 else message[:397] + "..."
            if len(_STATE.export_errors) < 5 and text not in _STATE.export_errors:
                _STATE.export_errors.append(text)


    def _as_without_us(self, record: logging.LogRecord) -> None:
        """The run's output unchanged: with no other handler on the record's way, logging
        would have printed it through ``logging.lastResort`` (stderr); this handler being
        there stops that, so it does it."""
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if any(h is not self for h in logger.handlers):
                return
            logger = logger.parent if logger.propagate else None
        last = logging.lastResort
        if last is not None and record.levelno >= last.level:
            last.handle(record)


def _processor_info() -> dict[str, Any]:
    info: dict[str, Any] = {"installed": False}
    try:
        # The instrumentor that loaded this hook (the top layer: looked up, not imported;
        # not loaded, it has no instance either).
        instrument = sys.modules.get("otel_progress.instrument")
        cls = getattr(instrument, "ProgressInstrumentor", None)
        instance = getattr(cls, "_instance", None) if cls is not None else None
        processor = getattr(instance, "processor", None) if instance is not None else None
        if processor is None:
            return info
        wrapped = []
        for p in getattr(processor, "wrapped", ()) or ():
            if isinstance(p, _Watcher):
                continue
            exporter = getattr(p, "span_exporter", None)
            if exporter is None:
                inner = getattr(p, "_batch_processor", None)
                exporter = getattr(inner, "_exporter", None)
            name = type(p).__name__
            wrapped.append(f"{name}({type(exporter).__name__})" if exporter is not None else name)
        info.update(installed=True, wraps=wrapped, analysis=getattr(processor, "analysis", None),
                    annotates_in_on_ending=getattr(processor, "annotates_in_on_ending", None))
    except Exception as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"
    return info


def _instrumented() -> list[str]:
    """Entry-point names of the instrumentors that are instrumenting in this process."""
    out: list[str] = []
    try:
        from importlib.metadata import entry_points

        for ep in entry_points(group="opentelemetry_instrumentor"):
            module, _, attr = ep.value.partition(":")
            mod = sys.modules.get(module.strip())
            cls = getattr(mod, attr.strip(), None) if mod is not None and attr else None
            instance = getattr(cls, "_instance", None) if cls is not None else None
            if instance is not None and getattr(instance, "is_instrumented_by_opentelemetry", False):
                out.append(ep.name)
    except Exception:
        pass
    return out


def _write_report() -> None:
    path = os.environ.get(ENV_REPORT)
    if not path or os.getpid() != _STATE.pid:  # a forked child writes nothing
        return
    try:
        from opentelemetry import trace

        provider = trace.get_tracer_provider()
        flush = getattr(provider, "force_flush", None)
        if flush is not None:
            flush(10_000)
    except Exception:
        pass
    with _STATE.lock:
        data = {
            "spans": _STATE.spans,
            "kinds": dict(_STATE.kinds),
            "scopes": dict(_STATE.scopes),
            "tool_spans": _STATE.tool_count,
            "tool_spans_with_arguments": _STATE.with_arguments,
            "tool_spans_with_result": _STATE.with_result,
            "tool_spans_annotated": _STATE.annotated,
            "tools": list(_STATE.tool_spans),
            "model_spans": _STATE.model_count,
            "model_spans_with_output": _STATE.model_with_output,
            "model_bare": _STATE.model_bare,
            "detections": list(_STATE.detections),
            "errors": list(_STATE.errors),
            "export_failures": _STATE.export_failures,
            "export_errors": list(_STATE.export_errors),
        }
    data["processor"] = _processor_info()
    data["instrumented"] = _instrumented()
    try:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError as exc:
        _log.warning("otel-progress doctor: cannot write the run's report to %s: %s", path, exc)


def on_detection(detection: Any) -> None:
    """The hook the progress processor calls for every detection of the watched run."""
    try:
        row = detection.to_dict()
    except Exception:
        row = {"reason": str(getattr(detection, "reason", "?"))}
    with _STATE.lock:
        if len(_STATE.detections) < 1000:
            _STATE.detections.append(row)
    chained = _STATE.chained
    if chained is not None:
        chained(detection)


def _install() -> None:
    spec = os.environ.get(ENV_CHAINED_HOOK, "").strip()
    if spec:
        try:
            from ..processor.settings import load_hook

            _STATE.chained = load_hook(spec)
        except Exception as exc:
            _STATE.errors.append(f"cannot load your OTEL_PROGRESS_ON_DETECTION {spec!r}: {exc}")
    logging.getLogger("opentelemetry.exporter").addHandler(_ExportFailures())
    try:
        from opentelemetry import trace

        provider = trace.get_tracer_provider()
        if hasattr(provider, "add_span_processor"):
            provider.add_span_processor(_Watcher())
        else:
            _STATE.errors.append(f"no SDK tracer provider to watch ({type(provider).__name__})")
    except Exception as exc:
        _STATE.errors.append(f"cannot watch the spans: {type(exc).__name__}: {exc}")
    atexit.register(_write_report)


if os.environ.get(ENV_REPORT):  # only inside a run the doctor watches
    _install()
