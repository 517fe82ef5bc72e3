"""Where the processor analyses spans: ``inline`` (in ``span.end()``) or ``background``
(a worker thread), and how ``auto`` is resolved (docs/processor.md, *Background analysis*)."""

from __future__ import annotations

import os
from typing import Any

from ..config import ConfigError

__all__ = ["ANALYSIS_MODES", "ENV_ANALYSIS", "analysis_mode", "resolve_mode"]

#: The values of ``analysis=`` / ``OTEL_PROGRESS_ANALYSIS``.
ANALYSIS_MODES = ("auto", "inline", "background")
ENV_ANALYSIS = "OTEL_PROGRESS_ANALYSIS"


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
