"""Admission: whether the service takes on one more Export request now.

The service holds at most ``max_inflight`` requests or ``max_inflight_mib`` MiB of them
at once; a request beyond either limit is refused before any work (the caller answers
``UNAVAILABLE`` with ``RetryInfo``, :mod:`.rpc`), in a gRPC worker thread kept free for
refusals (:mod:`.listener`). A request alone is always admitted, however large.
"""

from __future__ import annotations

import threading

from .metrics import ServiceMetrics

__all__ = ["Admission"]


class Admission:
    """The in-flight limits. Thread-safe: :meth:`enter` and :meth:`leave` are called from
    every gRPC worker thread."""

    def __init__(self, max_inflight: int, max_inflight_mib: int, metrics: ServiceMetrics) -> None:
        self.max_inflight = max_inflight
        self.max_inflight_mib = max_inflight_mib
        self._metrics = metrics
        self._inflight = 0
        self._inflight_bytes = 0
        self._lock = threading.Lock()

    @property
    def inflight(self) -> int:
        """The number of requests admitted and not yet left."""
        return self._inflight

    def enter(self, size: int) -> str | None:
        """Admit a request of ``size`` bytes, or say why not (the service is at
        ``max_inflight`` requests or ``max_inflight_mib`` bytes; a request alone is
        always admitted). Decided before any work, in a thread kept free for it. A
        refusal is counted (``progress.service.refused``); an admitted request must
        :meth:`leave`."""
        with self._lock:
            if self._inflight >= self.max_inflight:
                why = f"otel-progress is at its limit of {self.max_inflight} requests in flight; retry later"
            elif self._inflight and self._inflight_bytes + size > self.max_inflight_mib * 1024 * 1024:
                why = (f"otel-progress is at its limit of {self.max_inflight_mib} MiB of requests in flight;"
                       " retry later")
            else:
                self._inflight += 1
                self._inflight_bytes += size
                return None
        self._metrics.add("progress.service.refused", 1)
        return why

    def leave(self, size: int) -> None:
        """A request of ``size`` bytes admitted by :meth:`enter` is done."""
        with self._lock:
            self._inflight -= 1
            self._inflight_bytes -= size
