"""``serve``'s warning when tool spans cannot form runs: each the root of a trace of its own,
naming no conversation (a bare MCP client, a script calling tools without an agent span).
The condition is :mod:`otel_progress.runs.ungrouped`'s, per ``service.name`` of the spans'
resource; :class:`UngroupedSpans` logs it once per service (logger
``otel_progress.service``, level WARNING) and counts the spans in
``progress.service.setup.ungrouped_spans`` (docs/service.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from ..conventions.grouping import ungrouped_root
from ..conventions.spans import SpanKind
from ..model.limits import MAX_METRIC_CHARS, clip_chars
from ..runs.traces import Arrival
from ..runs.ungrouped import UNKNOWN_SERVICE, UngroupedWatch, warning_text
from .metrics import ServiceMetrics

__all__ = ["MAX_LABELS", "METRIC", "UngroupedSpans"]

#: The service's counter of these spans.
METRIC = "progress.service.setup.ungrouped_spans"
#: Distinct ``service.name`` label values before the rest are counted as ``_other``.
MAX_LABELS = 200

_log = logging.getLogger("otel_progress.service")


class UngroupedSpans:
    """Looks at the fresh spans of each request (retries are not counted twice)."""

    def __init__(self, metrics: ServiceMetrics, watch: UngroupedWatch | None = None) -> None:
        self._metrics = metrics
        self.watch = watch if watch is not None else UngroupedWatch()
        self._labels: set[str] = set()
        self._lock = threading.Lock()

    def seen(self, arrivals: Iterable[Arrival]) -> None:
        """The spans a request brought that were not seen before."""
        for arrival in arrivals:
            record = arrival.record
            if arrival.kind is not SpanKind.TOOL or not ungrouped_root(record):
                continue
            value = record.resource.get("service.name")
            service = clip_chars(value, MAX_METRIC_CHARS) if isinstance(value, str) and value else None
            verdict = self.watch.seen(service, record.end_ns)
            if verdict.count:
                self._metrics.add(METRIC, verdict.count, {"service.name": self._label(service)})
            if verdict.warn:
                _log.warning(warning_text(service, verdict.count, self.watch.window_ns / 1e9,
                                          METRIC.replace(".", "_") + "_total"))

    def _label(self, service: str | None) -> str:
        name = service or UNKNOWN_SERVICE
        with self._lock:
            if name in self._labels:
                return name
            if len(self._labels) < MAX_LABELS:
                self._labels.add(name)
                return name
        return "_other"
