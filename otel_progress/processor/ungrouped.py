"""The run-time warning when tool spans cannot form runs: each the root of a trace of its
own, naming no conversation (a bare MCP client, a script calling tools without an agent
span). The condition is :mod:`otel_progress.runs.ungrouped`'s; :class:`UngroupedSetup`
logs it once per service (logger ``otel_progress``, level WARNING) and counts the spans in
``progress.setup.ungrouped_spans`` (docs/processor.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..conventions.grouping import names_conversation
from ..runs.ungrouped import UngroupedWatch, warning_text
from .metrics import ProgressMetrics

__all__ = ["METRIC", "UngroupedSetup"]

#: The processor's counter of these spans.
METRIC = "progress.setup.ungrouped_spans"

_log = logging.getLogger("otel_progress")

ToolCallHook = Callable[[Any, Any, Mapping[str, Any]], None]


def _service(span: Any) -> str | None:
    """The span's resource ``service.name`` (public ``ReadableSpan.resource``), if any."""
    try:
        value = span.resource.attributes.get("service.name")
    except Exception:
        return None
    return value if isinstance(value, str) and value else None


class UngroupedSetup:
    """Sees every tool call the run tracker reads (its ``tool_call`` hook), then passes it
    on to ``then``."""

    def __init__(self, metrics: ProgressMetrics, then: ToolCallHook | None = None,
                 watch: UngroupedWatch | None = None) -> None:
        self._metrics = metrics
        self._then = then
        self.watch = watch if watch is not None else UngroupedWatch()

    def tool_call(self, call: Any, span: Any, attrs: Mapping[str, Any]) -> None:
        """A tool call read from ``span`` (an ended SDK span; nested calls never come here)."""
        if self._then is not None:
            self._then(call, span, attrs)
        if getattr(span, "parent", None) is not None or names_conversation(attrs):
            return
        service = _service(span)
        verdict = self.watch.seen(service, getattr(span, "end_time", None) or 0)
        if verdict.count:
            self._metrics.ungrouped_spans(verdict.count, service)
        if verdict.warn:
            _log.warning(warning_text(service, verdict.count, self.watch.window_ns / 1e9, METRIC))
