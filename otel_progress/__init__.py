"""otel-progress: notice when an AI agent stops making progress, from its OpenTelemetry
tool-call spans.

The engine (:class:`ProgressEngine`) is pure Python; the span processor, the OTLP
service and the ``scan`` command are thin adapters over it.
"""

from __future__ import annotations

from .engine import EngineStats, ProgressEngine, RunSummary
from .engine.config import Config, ConfigError
from .engine.manifest import ManifestError, ToolSpec, load_manifest, parse_manifest
from .engine.repeat import first_repeat_turn
from .model import (
    EVENT_LIVELOCK,
    EVENT_NO_PROGRESS,
    NOT_CAPTURED,
    Compaction,
    Detection,
    Level,
    Reason,
    Scope,
    ToolCall,
)
from .model.version import __version__ as __version__

__all__ = [
    "EVENT_LIVELOCK",
    "EVENT_NO_PROGRESS",
    "NOT_CAPTURED",
    "Compaction",
    "Config",
    "ConfigError",
    "Detection",
    "EngineStats",
    "Level",
    "ManifestError",
    "ProgressEngine",
    "ProgressInstrumentor",
    "ProgressSpanProcessor",
    "Reason",
    "RunSummary",
    "Scope",
    "ToolCall",
    "ToolSpec",
    "first_repeat_turn",
    "load_manifest",
    "parse_manifest",
]

_LAZY = {"ProgressSpanProcessor": ".processor", "ProgressInstrumentor": ".instrument"}


def __getattr__(name: str) -> object:
    """Import the SDK adapters on first use, so the engine never imports the SDK."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value
