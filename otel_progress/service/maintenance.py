"""The service's maintenance thread: twice a second, what no request triggers.

It closes and evicts the traces due (:meth:`.detector.BatchDetector.maintain`; their
detections, having no request to go in, are sent as log records when detection records
are on), ends the log runs idle for the run TTL (their findings go to the logs tap), and
probes the downstream whenever no forward has told for ``--forward-probe-interval``
seconds, so that readiness follows it without traffic (:class:`.downstream.DownstreamState`),
and writes a checkpoint every ``--checkpoint-interval`` seconds (:mod:`.state`).
"""

from __future__ import annotations

import logging
import threading

from .detector import BatchDetector
from .logs import LogsDetector
from .metrics import ServiceMetrics
from .outputs import Outputs
from .state import StateKeeper

__all__ = ["Maintenance"]

_log = logging.getLogger("otel_progress.service")


class Maintenance:
    """A daemon thread from :meth:`start` to :meth:`stop`. A failing round is counted
    (``progress.service.errors``) and logged; the thread goes on."""

    def __init__(self, detector: BatchDetector, logs: LogsDetector, outputs: Outputs,
                 metrics: ServiceMetrics, keeper: StateKeeper | None = None) -> None:
        self._detector = detector
        self._logs = logs
        self._outputs = outputs
        self._metrics = metrics
        self._keeper = keeper
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="otel-progress-maintain", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread and wait for it (at most ``timeout`` seconds)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self._round()
            except Exception:  # pragma: no cover - never let maintenance die
                self._metrics.add("progress.service.errors")
                _log.exception("otel-progress: maintenance failed")

    def _round(self) -> None:
        outputs = self._outputs
        found = self._detector.maintain()
        if found and outputs.detection_logs is not None:
            outputs.detection_logs.detached(found)  # (no request to go in: as log records)
        ended = self._logs.end_idle()
        if ended.added and outputs.logs_tap is not None:
            outputs.logs_tap.submit(self._logs.findings_request(ended))
        outputs.probe_downstream()
        if self._keeper is not None:
            self._keeper.tick(self._detector)  # (a checkpoint every --checkpoint-interval)
