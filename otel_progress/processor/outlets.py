"""Where a detection goes besides the spans: the metrics, the log records
(:mod:`.log_events`) and the application's ``on_detection`` hook."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..model import Detection
from .errors import CaughtErrors
from .log_events import DetectionLogger
from .metrics import ProgressMetrics

__all__ = ["DetectionHook", "DetectionOutlets"]

DetectionHook = Callable[[Detection], Any]


class DetectionOutlets:
    """Hands each detection to the metrics, the :class:`DetectionLogger` (None: no log
    records) and the hook (None: none). The hook's exceptions are caught, counted in
    ``hook_errors`` and the ``progress.hook.errors`` metric, and logged (rate-limited)."""

    def __init__(self, metrics: ProgressMetrics, log_events: DetectionLogger | None,
                 hook: DetectionHook | None, errors: CaughtErrors) -> None:
        self._metrics = metrics
        self._log_events = log_events
        self._hook = hook
        self._errors = errors
        #: exceptions the hook raised so far (the processor's ``hook_errors``)
        self.hook_errors = 0

    def emit(self, det: Detection) -> None:
        """Count the detection, emit its log record, call the hook."""
        self._metrics.detection(det)
        if self._log_events is not None:
            self._log_events.emit(det)
        hook = self._hook
        if hook is None:
            return
        try:
            hook(det)
        except Exception as exc:
            self.hook_errors += 1
            self._metrics.hook_error(type(exc).__name__)
            self._errors.log_once("on_detection hook", exc)
