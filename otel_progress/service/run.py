"""The ``otel-progress serve`` process: logging to stderr, the garbage collector tuned for
the service, the start-up message, and SIGTERM/SIGINT draining the service (see
:class:`.server.ProgressService`)."""

from __future__ import annotations

import gc
import logging
import signal
import sys
import threading
from typing import Any

from ..engine.config import ConfigError
from .options import ServiceConfig, ServiceConfigError
from .server import ProgressService

__all__ = ["run_serve"]


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _tune_gc() -> None:
    """Run Python's cyclic garbage collector less often in the service's process.

    The engine's per-trace state is large and long-lived, and with the default thresholds
    (700, 10, 10) a full collection traverses all of it every few hundred requests: about
    5% of the CPU per request. Reference counting frees nearly everything a request
    allocates, so young objects are collected every 10,000 net allocations instead, and
    the objects of start-up (modules, classes) are frozen out of every collection."""
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


def run_serve(config: ServiceConfig) -> int:
    """Run the service until SIGTERM/SIGINT; returns the exit status. The process is the
    service's own, so its garbage collector is tuned for it (:func:`_tune_gc`)."""
    _configure_logging(config.log_level)
    try:
        service = ProgressService(config).start()
    except (ServiceConfigError, ConfigError) as exc:
        print(f"otel-progress serve: {exc}", file=sys.stderr)
        return 2
    _tune_gc()
    print(service.describe(), file=sys.stderr, flush=True)

    def _stop(signum: int, _frame: Any) -> None:
        queued = (" and the findings queued for the tap endpoint" if config.mode == "tap"
                  else " and the detection log records queued" if config.detection_events != "span" else "")
        print(f"otel-progress serve: {signal.Signals(signum).name}: draining requests in flight{queued}"
              f" (up to {config.drain_timeout:g}s)", file=sys.stderr, flush=True)
        threading.Thread(target=service.stop, name="otel-progress-stop", daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    while not service.wait(0.5):
        pass
    print("otel-progress serve: stopped", file=sys.stderr, flush=True)
    return 0
