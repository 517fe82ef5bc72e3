"""``otel-progress serve``: detection as an OTLP/gRPC service in a Collector pipeline.

See docs/service.md. Entry points: :class:`ProgressService` (embed or test),
:func:`run_serve` (the command), :class:`ServiceConfig` / :func:`from_args` (options).
Names are imported lazily, so that ``otel-progress --help`` does not load grpcio.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "BatchDetector",
    "BatchResult",
    "MalformedRequest",
    "ProgressService",
    "ServiceConfig",
    "ServiceConfigError",
    "add_arguments",
    "from_args",
    "run_serve",
]

_WHERE = {
    "BatchDetector": "detector",
    "BatchResult": "detector",
    "MalformedRequest": "detector",
    "ProgressService": "server",
    "run_serve": "run",
    "ServiceConfig": "options",
    "ServiceConfigError": "options",
    "add_arguments": "options",
    "from_args": "options",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
