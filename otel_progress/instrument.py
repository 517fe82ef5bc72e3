"""Zero-code enablement: the ``progress`` entry point of ``opentelemetry_instrumentor``.

With otel-progress installed, ``opentelemetry-instrument python agent.py`` loads
:class:`ProgressInstrumentor` after the SDK is configured (from ``OTEL_*`` variables or
from ``OTEL_CONFIG_FILE``). It puts a :class:`~otel_progress.processor.ProgressSpanProcessor`
in front of the tracer provider's span processors (the exporting ones), so that the
tool span itself carries the detection. Where the provider is not the SDK's, or its
internals are not as expected, it adds the processor after the others instead and warns
once: then the run's agent span carries the event, the tool span does not (unless the
SDK's ``_on_ending`` can modify spans).

Turn it off with ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=progress``. Settings come from
``instrument(**options)`` (the declarative file's ``instrumentation/development:
python: progress: {...}``), then from ``OTEL_PROGRESS_*`` variables, the later
overriding the earlier. See docs/processor.md.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from .engine.config import ConfigError
from .processor import (
    ENV_ANALYSIS,
    ENV_DETECTION_EVENTS,
    ProgressSpanProcessor,
    analysis_mode,
    detection_events_mode,
)
from .processor.settings import SECTION, build_config, load_hook

__all__ = ["ENTRY_POINT", "ProgressInstrumentor"]

_log = logging.getLogger(__name__)

#: The entry point's name (for ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` and the
#: declarative file's ``instrumentation/development.python`` section).
ENTRY_POINT = "progress"

_PROCESSOR_OPTIONS = ("annotate_tool_spans", "annotate_agent_spans", "max_spans", "analysis", "max_queue_size",
                      "detection_events")
_ENV_HOOK = "OTEL_PROGRESS_ON_DETECTION"


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _processor_kwargs(processor_options: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
    """The processor's keyword arguments: ``kwargs`` (config, hook, providers) and the
    processor options of ``instrument()`` or the declarative file, checked and converted;
    ``OTEL_PROGRESS_ANALYSIS`` and ``OTEL_PROGRESS_DETECTION_EVENTS`` override theirs."""
    for key in ("annotate_tool_spans", "annotate_agent_spans"):
        if key in processor_options:
            kwargs[key] = _truthy(processor_options[key])
    for key in ("max_spans", "max_queue_size"):
        if key in processor_options:
            try:
                kwargs[key] = int(processor_options[key])
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{SECTION}: {key}: expected a whole number,"
                                  f" got {processor_options[key]!r}") from exc
    option = processor_options.get("analysis")
    if os.environ.get(ENV_ANALYSIS, "").strip() or option is None:
        kwargs["analysis"] = analysis_mode()  # the variable, else auto
    else:
        kwargs["analysis"] = analysis_mode(option, f"{SECTION}: analysis")
    option = processor_options.get("detection_events")
    if os.environ.get(ENV_DETECTION_EVENTS, "").strip() or option is None:
        kwargs["detection_events"] = detection_events_mode()  # the variable, else both
    else:
        kwargs["detection_events"] = detection_events_mode(option, f"{SECTION}: detection_events")
    return kwargs


class ProgressInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Installs the progress processor on the global (or given) SDK tracer provider.

    ``instrument()`` options (all optional): ``tracer_provider``, ``meter_provider``,
    ``on_detection`` (a callable or ``"module:function"``), ``annotate_tool_spans``,
    ``annotate_agent_spans``, ``max_spans``, ``analysis`` (``auto``, ``inline`` or
    ``background``; ``OTEL_PROGRESS_ANALYSIS`` overrides it), ``max_queue_size``, ``detection_events``
    (``span``, ``log`` or ``both``; ``OTEL_PROGRESS_DETECTION_EVENTS`` overrides it), ``logger_provider``,
    ``config_file``, and any
    engine setting (``window``, ``barren_threshold``, ``manifest_file``, ``manifest``,
    ``digest_key``, ...).
    """

    def __init__(self) -> None:
        super().__init__()
        if not hasattr(self, "_state"):
            self._state: dict[str, Any] = {}

    @property
    def processor(self) -> ProgressSpanProcessor | None:
        """The installed processor, or None."""
        return self._state.get("processor")

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()

    def instrument(self, **kwargs: Any) -> Any:
        # A second call (opentelemetry-instrument after the declarative file already
        # instrumented) is not worth a warning.
        if self.is_instrumented_by_opentelemetry:
            return None
        return super().instrument(**kwargs)

    def _instrument(self, **kwargs: Any) -> None:
        # Never raise: opentelemetry-instrument re-raises an instrumentor's exception and
        # the application would not start.
        try:
            self._install(**kwargs)
        except ConfigError as exc:
            _log.error("otel-progress: not enabled: %s", exc)
        except Exception:
            _log.exception("otel-progress: not enabled: setting up the processor failed")

    def _install(
        self,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        on_detection: Any = None,
        logger_provider: Any = None,
        **options: Any,
    ) -> None:
        processor_options = {k: options.pop(k) for k in _PROCESSOR_OPTIONS if k in options}
        config = build_config(options)
        hook = load_hook(on_detection if on_detection is not None else os.environ.get(_ENV_HOOK))
        kwargs = _processor_kwargs(processor_options, config=config, on_detection=hook,
                                   meter_provider=meter_provider, logger_provider=logger_provider)
        provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        if not hasattr(provider, "add_span_processor"):
            _log.warning(
                "otel-progress: not enabled: no OpenTelemetry SDK TracerProvider is installed"
                " (%s); configure the SDK first (opentelemetry-instrument does)",
                type(provider).__name__,
            )
            return
        self._attach(provider, kwargs)

    def _attach(self, provider: Any, kwargs: dict[str, Any]) -> None:
        """Wrap the provider's span processors in a new processor (in place, under the
        provider's lock), or, where the SDK's internals are not what this expects, add
        the processor beside them."""
        active = getattr(provider, "_active_span_processor", None)
        lock = getattr(active, "_lock", None)
        existing = getattr(active, "_span_processors", None)
        if active is not None and lock is not None and isinstance(existing, tuple):
            with lock:
                existing = active._span_processors
                processor = ProgressSpanProcessor(existing, **kwargs)
                active._span_processors = (processor,)
            self._state.update(processor=processor, provider=provider, wrapped=True)
            _log.debug("otel-progress: wrapping %d span processor(s)", len(existing))
            return
        processor = ProgressSpanProcessor(None, **kwargs)
        provider.add_span_processor(processor)
        self._state.update(processor=processor, provider=provider, wrapped=False)
        if not processor.annotates_in_on_ending:
            _log.warning(
                "otel-progress: the tracer provider's span processors could not be wrapped"
                " (%s); detections are added to the agent spans only, not to the tool spans",
                type(active).__name__,
            )

    def _uninstrument(self, **kwargs: Any) -> None:
        processor = self._state.pop("processor", None)
        provider = self._state.pop("provider", None)
        wrapped = self._state.pop("wrapped", False)
        if processor is None or provider is None:
            return
        if processor.analysis == "background":
            processor.force_flush(5000)  # hand the queued spans over before the later ones
        active = getattr(provider, "_active_span_processor", None)
        lock = getattr(active, "_lock", None)
        if active is None or lock is None:
            return
        with lock:
            current = getattr(active, "_span_processors", ())
            if wrapped:
                active._span_processors = tuple(
                    p for q in current for p in (processor.wrapped if q is processor else (q,))
                )
            else:
                active._span_processors = tuple(q for q in current if q is not processor)
