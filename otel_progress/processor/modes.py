"""Where the processor analyses spans: ``inline`` (in ``span.end()``) or ``background``
(a worker thread), how ``auto`` is resolved (docs/processor.md, *Background analysis*),
and the process hooks the background mode needs (fork, interpreter exit)."""

from __future__ import annotations

import atexit
import os
import time
import weakref
from typing import TYPE_CHECKING, Any

from ..engine.config import ConfigError

if TYPE_CHECKING:
    from .span_processor import ProgressSpanProcessor

__all__ = ["ANALYSIS_MODES", "ENV_ANALYSIS", "analysis_mode", "register_process_hooks", "resolve_mode"]

#: The values of ``analysis=`` / ``OTEL_PROGRESS_ANALYSIS``.
ANALYSIS_MODES = ("auto", "inline", "background")
ENV_ANALYSIS = "OTEL_PROGRESS_ANALYSIS"
_EXIT_DRAIN_SECONDS = 10.0  # at interpreter exit, how long the queue may take to drain


def analysis_mode(value: Any = None, source: str = "analysis") -> str:
    """The analysis setting, one of :data:`ANALYSIS_MODES`: ``value``, else
    ``OTEL_PROGRESS_ANALYSIS``, else ``"auto"``. Raises :class:`ConfigError` naming
    ``source`` (or the variable)."""
    if value is None:
        value, source = os.environ.get(ENV_ANALYSIS, ""), ENV_ANALYSIS
        if not value.strip():
            return "auto"
    mode = str(value).strip().lower()
    if mode not in ANALYSIS_MODES:
        raise ConfigError(f"{source}: expected {', '.join(ANALYSIS_MODES)}, got {value!r}")
    return mode


def resolve_mode(mode: str, *, hook: bool, wraps: bool, use_on_ending: bool | None) -> str:
    """``inline`` or ``background`` for a setting (``auto`` resolved)."""
    if mode == "auto":
        # A hook acts on a detection before the application's next step only inline.
        # Without a wrapped processor there is no copy to carry what the worker finds
        # after a span ended. Otherwise the application thread is spared the analysis.
        mode = "inline" if hook or not wraps or use_on_ending else "background"
    if mode == "background" and use_on_ending:
        raise ValueError("use_on_ending=True needs inline analysis: the worker analyses a"
                         " span after the SDK froze it")
    return mode


def register_process_hooks(ref: weakref.ReferenceType[ProgressSpanProcessor]) -> None:
    """A forked child starts afresh; with background analysis, the queue is drained at
    interpreter exit. Neither hook holds the processor (``ref``: weakly)."""

    def _after_fork() -> None:
        processor = ref()
        if processor is not None:
            processor._after_fork_in_child()

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork)
    processor = ref()
    if processor is not None and processor._background:
        # Registered after the SDK's providers, so it runs before their shutdown (atexit
        # runs last-in first-out): the queued spans are analysed while the meter provider
        # and the exporters still take the detections and the spans.
        def _drain_at_exit() -> None:
            processor = ref()
            if processor is not None and processor._background and processor._handoff is not None:
                processor._handoff.drain(time.monotonic() + _EXIT_DRAIN_SECONDS)

        processor._at_exit = _drain_at_exit
        atexit.register(_drain_at_exit)
