"""What operators see of the downstream: rate-limited log lines and reachability.

:class:`RateLimitedLog` writes at most one line per kind of event every ``interval``
seconds and says how many it held back since the last one. :class:`DownstreamState`
remembers whether the downstream endpoint is reachable, and readiness (``/readyz``)
answers 503 while it is not:

* at start, the service probes it before it says ready: not reachable until a probe or a
  forward reaches it;
* two forwards or probes in a row that fail as unreachable (UNAVAILABLE or
  DEADLINE_EXCEEDED) mark it down; any answer from it (a forward that succeeds, or fails
  with another code) marks it reachable;
* whenever no forward has told for ``probe_interval`` seconds (idle, or not ready and so
  sent nothing), the service's maintenance thread probes it (:meth:`DownstreamState.probe`):
  while it is reachable (and at the first probe, at start), by connecting only (nothing is
  sent); while it is marked unreachable, by connecting and then sending an empty Export
  request (no telemetry), so that it is ready again only once the downstream answers (a
  proxy in front of it may accept connections while it does not).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

import grpc

__all__ = ["DownstreamState", "Probed", "RateLimitedLog"]

_UNREACHABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
_EMPTY_REQUEST = b""  # an ExportTraceServiceRequest with nothing in it, serialised


class _Answer(Protocol):
    ok: bool
    code: grpc.StatusCode
    message: str


class Probed(Protocol):
    """What :meth:`DownstreamState.probe` needs of the forwarder (:class:`.forwarder.Forwarder`)."""

    def connect(self, timeout: float) -> tuple[bool, str]: ...

    def forward(self, raw: bytes, timeout: float | None = None) -> _Answer: ...


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
    """Reachability of the downstream endpoint (see the module docstring). Not reachable
    until a forward or a probe has reached it."""

    def __init__(self, endpoint: str, log: RateLimitedLog, *, failures_to_down: int = 2,
                 probe_interval: float = 2.0, probe_timeout: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoint = endpoint
        self._log = log
        self.failures_to_down = failures_to_down
        self.probe_interval = probe_interval
        self.probe_timeout = probe_timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._reached = False  # reached at least once
        self.down_since: float | None = clock()
        self.last_error = "not reached yet"
        self._last_told = float("-inf")  # when a forward or probe last said something

    @property
    def reachable(self) -> bool:
        return self.down_since is None

    def record(self, ok: bool, code: grpc.StatusCode = grpc.StatusCode.OK, message: str = "") -> None:
        """Record the outcome of a forward or probe. A failure other than unreachable (the
        downstream answered) counts as reachable."""
        now = self._clock()
        with self._lock:
            self._last_told = now
            if ok or code not in _UNREACHABLE:
                was_down, reached, failed = self.down_since, self._reached, self._failures
                self._failures = 0
                self.down_since = None
                self._reached = True
                if was_down is not None and failed:  # (not on the first probe at start)
                    again = " again" if reached else ""
                    self._log.log("downstream-up", logging.WARNING,
                                  f"otel-progress: downstream {self.endpoint} reachable{again} after"
                                  f" {now - was_down:.0f}s; ready")
                return
            self._failures += 1
            self.last_error = f"{code.name}: {message}"[:300]
            if not self._reached and self._failures == 1:  # not reachable at start: already down
                self._logged_down(" at start")
            elif self.down_since is None and self._failures >= self.failures_to_down:
                self.down_since = now
                self._logged_down("")

    def _logged_down(self, when: str) -> None:
        self._log.log("downstream-down", logging.ERROR,
                      f"otel-progress: downstream {self.endpoint} unreachable{when} ({self.last_error});"
                      " batches are not acknowledged (the sender retries) and /readyz answers 503"
                      " until it is reachable")

    def probe_due(self) -> bool:
        """Whether the maintenance thread should probe now: nothing told for
        ``probe_interval`` seconds (the probe is then counted as under way)."""
        now = self._clock()
        with self._lock:
            if now - self._last_told < self.probe_interval:
                return False
            self._last_told = now
            return True

    def probe(self, forwarder: Probed) -> None:
        """Probe the downstream through ``forwarder``'s channel and record the outcome:
        connect (at most ``probe_timeout`` seconds); while it is marked unreachable (not
        at the first probe at start), also send an empty Export request and record its
        answer. Never raises."""
        connected, why = forwarder.connect(self.probe_timeout)
        if not connected:
            self.record(False, grpc.StatusCode.UNAVAILABLE, why)
        elif self.down_since is not None and self._failures:  # marked unreachable: it must answer
            result = forwarder.forward(_EMPTY_REQUEST, self.probe_timeout)
            self.record(result.ok, result.code, result.message)
        else:
            self.record(True)

    def describe(self) -> str:
        if self.down_since is None:
            return "reachable"
        return (f"downstream {self.endpoint} unreachable for {self._clock() - self.down_since:.0f}s"
                f" ({self.last_error})")
