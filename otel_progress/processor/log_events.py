"""Detections as log events in span context, through the SDK's logs pipeline.

Each detection is emitted as the ``gen_ai.evaluation.result`` record of
:mod:`otel_progress.model.evaluation` through a ``Logger`` of the application's
``LoggerProvider`` (the global one that ``opentelemetry-instrument`` or the application's
SDK set-up installs, or the one given), in the context of the span the detection belongs
on: the record's trace and span ids are that span's, so backends show it with the span
(OTEP 4430: new code emits events through the Logs API, correlated with the span).

Only public API is used: ``opentelemetry._logs.get_logger`` and ``Logger.emit`` with
keyword arguments (the API of SDK 1.40 to the newest), else ``Logger.emit(LogRecord(...))``
on an API without them; a ``NonRecordingSpan`` carries the span's context. The work is
done only when a detection is emitted (on the thread that analyses: the application's
with inline analysis, the worker's in the background), never for a span without one, and
an error is handed to the processor's error counting instead of being raised.

Where no ``LoggerProvider`` is configured (the API's default proxy: nothing set one), it
says so once in a warning, and the span events stay on even when only log events were
asked for, so no detection goes unexported.
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from opentelemetry._logs import Logger as ApiLogger
from opentelemetry._logs import LogRecord, NoOpLoggerProvider, SeverityNumber, get_logger, get_logger_provider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from ..engine.config import ConfigError
from ..model import Detection
from ..model.evaluation import DETECTION_EVENTS, detection_events, evaluation_event
from ..model.version import __version__

__all__ = ["DETECTION_EVENTS", "ENV_DETECTION_EVENTS", "LOGGER_NAME", "DetectionLogger", "detection_events_mode",
           "logs_configured", "plan"]

_log = logging.getLogger("otel_progress.processor")

#: The environment variable of the ``detection_events`` setting.
ENV_DETECTION_EVENTS = "OTEL_PROGRESS_DETECTION_EVENTS"
#: The instrumentation scope of the records.
LOGGER_NAME = "otel_progress"

_SEVERITY = SeverityNumber.WARN
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
# Logger.emit(timestamp=..., event_name=...) exists from API 1.39 on (1.40 is the oldest
# SDK the processor supports); before, only emit(LogRecord).
_KEYWORD_EMIT = "event_name" in inspect.signature(ApiLogger.emit).parameters

Fail = Callable[[str, BaseException], None]


def detection_events_mode(value: Any = None, source: str = "detection_events") -> str:
    """The ``detection_events`` setting, one of :data:`DETECTION_EVENTS`: ``value``, else
    ``OTEL_PROGRESS_DETECTION_EVENTS``, else ``"both"``. Raises :class:`ConfigError`
    naming ``source`` (or the variable)."""
    if value is None:
        value, source = os.environ.get(ENV_DETECTION_EVENTS, ""), ENV_DETECTION_EVENTS
        if not value.strip():
            return "both"
    try:
        return detection_events(value, source)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def logs_configured(provider: Any) -> bool:
    """Whether ``provider`` is a real ``LoggerProvider``: not the API's no-op provider nor
    the proxy it returns before anything set one."""
    if provider is None or isinstance(provider, NoOpLoggerProvider):
        return False
    return type(provider).__name__ not in ("ProxyLoggerProvider", "NoOpLoggerProvider")


def _context(trace_id: str, span_id: str) -> Any:
    """The context of the detection's span (None: its ids are not hex ids, e.g. a detection
    of a trace's own run, which has no span: the record goes without one)."""
    try:
        ids = int(trace_id, 16), int(span_id, 16)
    except ValueError:
        return None
    span = NonRecordingSpan(SpanContext(ids[0], ids[1], is_remote=False, trace_flags=_SAMPLED))
    return set_span_in_context(span)


class DetectionLogger:
    """Emits each detection's ``gen_ai.evaluation.result`` record (see the module).

    Args:
        logger_provider: the ``LoggerProvider`` to emit through; default the global one,
            looked up at the first detection (a provider set after the processor was
            created is used: the API's proxy logger binds to it).
        fail: called with ``(where, exception)`` when an emission fails (the processor
            counts and logs it); the exception is never raised.
    """

    def __init__(self, logger_provider: Any = None, fail: Fail | None = None) -> None:
        self._provider = logger_provider
        self._fail = fail
        self._logger: Any = None
        self._checked = False
        #: Records handed to the Logs API.
        self.emitted = 0

    @property
    def provider(self) -> Any:
        """The provider the records go to (the global one unless one was given)."""
        return self._provider if self._provider is not None else get_logger_provider()

    @property
    def available(self) -> bool:
        """Whether a real ``LoggerProvider`` takes the records now."""
        return logs_configured(self.provider)

    def mark_checked(self) -> None:
        """The missing provider was reported already (do not warn at the first detection)."""
        self._checked = True

    def emit(self, det: Detection) -> None:
        """Emit the record of ``det``; never raises."""
        try:
            logger = self._logger
            if logger is None:
                logger = self._logger = get_logger(LOGGER_NAME, __version__, logger_provider=self._provider)
            if not self._checked:
                self._checked = True
                if not self.available:
                    _log.warning(
                        "otel-progress: no OpenTelemetry LoggerProvider is configured, so detections are not"
                        " emitted as log events (gen_ai.evaluation.result) until one is; they are on the spans"
                        " as span events (set up the SDK's logs, e.g. OTEL_LOGS_EXPORTER=otlp under"
                        " opentelemetry-instrument, or set %s=span to silence this)", ENV_DETECTION_EVENTS)
            event = evaluation_event(det)
            now = time.time_ns()
            context = _context(event.trace_id, event.span_id)
            if _KEYWORD_EMIT:
                logger.emit(timestamp=now, observed_timestamp=now, context=context, severity_number=_SEVERITY,
                            severity_text=event.severity_text, body=event.body, attributes=dict(event.attributes),
                            event_name=event.event_name)
            else:  # pragma: no cover - an API older than the SDKs the processor supports
                logger.emit(_record(now, context, event))
            self.emitted += 1
        except Exception as exc:
            if self._fail is not None:
                self._fail("detection log event", exc)


def _record(now: int, context: Any, event: Any) -> Any:  # pragma: no cover - see DetectionLogger.emit
    fields: dict[str, Any] = {"timestamp": now, "observed_timestamp": now, "context": context,
                              "severity_number": _SEVERITY, "severity_text": event.severity_text,
                              "body": event.body, "attributes": dict(event.attributes)}
    try:
        return LogRecord(event_name=event.event_name, **fields)
    except TypeError:  # no event_name yet: the event.name attribute says it
        return LogRecord(**fields)


def plan(mode: str, logger_provider: Any, annotate_tool_spans: bool, annotate_agent_spans: bool,
         fail: Fail | None) -> tuple[DetectionLogger | None, bool, bool]:
    """What a processor with the ``detection_events`` setting ``mode`` does: its
    :class:`DetectionLogger` (None for ``span``) and whether it annotates tool spans and
    agent spans. ``log`` leaves the spans alone, unless no ``LoggerProvider`` is
    configured yet (then it says so and keeps the span events)."""
    if mode == "span":
        return None, annotate_tool_spans, annotate_agent_spans
    logger = DetectionLogger(logger_provider, fail)
    if mode == "log":
        if logger.available:
            return logger, False, False
        logger.mark_checked()
        _log.warning(
            "otel-progress: detection_events is 'log', but no OpenTelemetry LoggerProvider is configured:"
            " detections stay span events as well (and go out as log events once a provider is set)")
    return logger, annotate_tool_spans, annotate_agent_spans
