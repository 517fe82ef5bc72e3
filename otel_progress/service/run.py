"""The ``otel-progress serve`` process: logging to stderr, the garbage collector tuned for
the service, the start-up message, and SIGTERM/SIGINT draining the service (see
:class:`.server.ProgressService`)."""

from __future__ import annotations

import gc
import hashlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from typing import Any

from ..engine.config import ConfigError
from .options import ServiceConfig, ServiceConfigError
from .server import ProgressService

_log = logging.getLogger("otel_progress.service")

__all__ = ["hash_seed", "pin_hash_seed", "run_serve"]

#: The hash seed of ``serve`` with run state and no digest key (see :func:`hash_seed`).
DEFAULT_HASH_SEED = 271828


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


def hash_seed(environ: Mapping[str, str]) -> int:
    """The ``PYTHONHASHSEED`` of a ``serve`` process that keeps run state: derived from the
    digest key (``OTEL_PROGRESS_DIGEST_KEY``), so that replicas configured alike agree and
    the seed is as secret as the key; :data:`DEFAULT_HASH_SEED` without a key."""
    key = environ.get("OTEL_PROGRESS_DIGEST_KEY", "")
    if not key:
        return DEFAULT_HASH_SEED
    digest = hashlib.sha256(b"otel-progress hash seed v1\x00" + key.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:4], "big") % 4294967295 + 1


def pin_hash_seed(config: ServiceConfig, environ: Mapping[str, str] | None = None) -> None:
    """Run state (``--state-dir``, ``--state-store``) is only meaningful to a process with
    the same hash seed (the engine's digests are Python's ``hash()``): unless
    ``PYTHONHASHSEED`` is set to a number already, the process starts itself again, with
    the same arguments and :func:`hash_seed`. Only a process started as ``serve`` does so
    (in another, a warning says that its state is its own)."""
    if not (config.state_dir or config.state_store):
        return
    env = dict(os.environ if environ is None else environ)
    if env.get("PYTHONHASHSEED", "").strip().isdigit():
        return
    argv = list(getattr(sys, "orig_argv", []))
    if "serve" not in argv[1:]:
        _log.warning("otel-progress: PYTHONHASHSEED is not set: the run state this process writes can be"
                     " continued only by itself")
        return
    env["PYTHONHASHSEED"] = str(hash_seed(env))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *argv[1:]], env)


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
