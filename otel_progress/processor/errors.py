"""Error containment: every error the processor catches is counted (``processor_errors``
and the ``progress.processor.errors`` metric) and logged at most once per five minutes per
kind. Nothing is raised into the application."""

from __future__ import annotations

import logging
import time

from .metrics import ProgressMetrics

__all__ = ["CaughtErrors"]

_log = logging.getLogger("otel_progress.processor")

_LOG_EVERY_SECONDS = 300.0


class CaughtErrors:
    """Counts and logs the errors the processor's parts catch (``fail``), and logs those
    another part counts itself (``log_once``: the hook's)."""

    def __init__(self, metrics: ProgressMetrics) -> None:
        self._metrics = metrics
        #: errors caught so far (the processor's ``processor_errors``)
        self.count = 0
        self._logged: dict[tuple[str, str], float] = {}

    def fail(self, where: str, exc: BaseException) -> None:
        """``exc`` was caught in ``where``: count it and log it (rate-limited)."""
        self.count += 1
        self._metrics.error(type(exc).__name__)
        self.log_once(where, exc)

    def log_once(self, where: str, exc: BaseException) -> None:
        """Log ``exc``, unless one of its kind from ``where`` was logged in the last five
        minutes."""
        key = (where, type(exc).__name__)
        now = time.monotonic()
        if now < self._logged.get(key, 0.0):
            return
        self._logged[key] = now + _LOG_EVERY_SECONDS
        _log.warning(
            "otel-progress: %s raised %s (caught; the application is unaffected; further"
            " errors of this kind are counted and logged at most every %d s)",
            where, type(exc).__name__, int(_LOG_EVERY_SECONDS), exc_info=exc,
        )
