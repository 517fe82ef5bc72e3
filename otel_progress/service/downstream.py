"""What operators see of the downstream: rate-limited log lines and reachability.

:class:`RateLimitedLog` writes at most one line per kind of event every ``interval``
seconds and says how many it held back since the last one. :class:`DownstreamState`
remembers whether the downstream endpoint is reachable: two forwards in a row that fail
as unreachable (UNAVAILABLE or DEADLINE_EXCEEDED) mark it down, and readiness
(``/readyz``) then answers 503 until a forward or a probe succeeds again; while it is down
the service's maintenance thread probes it with an empty Export request every
``probe_interval`` seconds, so that readiness recovers even when nothing is routed to a
replica that is not ready.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import grpc

__all__ = ["DownstreamState", "RateLimitedLog"]

_UNREACHABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class RateLimitedLog:
    """At most one log line per ``key`` every ``interval`` seconds."""

    def __init__(self, logger: logging.Logger, interval: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def log(self, key: str, level: int, message: str) -> bool:
        """Log ``message`` unless a line of this key was logged less than ``interval``
        seconds ago (then count it). Returns whether it was written."""
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval:
                self._held[key] = self._held.get(key, 0) + 1
                return False
            self._last[key] = now
            held = self._held.pop(key, 0)
        if held:
            message += f" ({held} more like this in the last {now - last:.0f}s)" if last is not None else ""
        self._logger.log(level, "%s", message)
        return True


class DownstreamState:
    """Reachability of the downstream endpoint (see the module docstring)."""

    def __init__(self, endpoint: str, log: RateLimitedLog, *, failures_to_down: int = 2,
                 probe_interval: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoint = endpoint
        self._log = log
        self.failures_to_down = failures_to_down
        self.probe_interval = probe_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self.down_since: float | None = None
        self.last_error = ""
        self._next_probe = 0.0

    @property
    def reachable(self) -> bool:
        return self.down_since is None

    def record(self, ok: bool, code: grpc.StatusCode = grpc.StatusCode.OK, message: str = "") -> None:
        """Record the outcome of a forward or probe. A failure other than unreachable (the
        downstream answered) counts as reachable."""
        now = self._clock()
        with self._lock:
            if ok or code not in _UNREACHABLE:
                was_down = self.down_since
                self._failures = 0
                self.down_since = None
                if was_down is not None:
                    self._log.log("downstream-up", logging.WARNING,
                                  f"otel-progress: downstream {self.endpoint} reachable again after"
                                  f" {now - was_down:.0f}s; ready")
                return
            self._failures += 1
            self.last_error = f"{code.name}: {message}"[:300]
            if self.down_since is None and self._failures >= self.failures_to_down:
                self.down_since = now
                self._next_probe = now + self.probe_interval
                self._log.log("downstream-down", logging.ERROR,
                              f"otel-progress: downstream {self.endpoint} unreachable ({self.last_error});"
                              " batches are not acknowledged (the sender retries) and /readyz answers 503"
                              " until it is reachable again")

    def probe_due(self) -> bool:
        """Whether the maintenance thread should probe now (down, and the interval passed)."""
        now = self._clock()
        with self._lock:
            if self.down_since is None or now < self._next_probe:
                return False
            self._next_probe = now + self.probe_interval
            return True

    def describe(self) -> str:
        if self.down_since is None:
            return "reachable"
        return (f"downstream {self.endpoint} unreachable for {self._clock() - self.down_since:.0f}s"
                f" ({self.last_error})")
