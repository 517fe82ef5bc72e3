"""A set-up whose tool calls cannot form runs: the condition, and the run-time warning.

A tool span that is the root of its own trace (no parent span, so no agent span above it)
and names no conversation (neither ``gen_ai.conversation.id`` nor ``session.id``: see
:mod:`otel_progress.conventions.grouping`) is a run of its own. One such span is not a
problem (a single call cannot loop). A client that makes many is: a bare MCP client, a
script calling tools, OpenLLMetry's MCP instrumentation give every call a trace of its
own, so no run ever sees a second call and a loop across them cannot be detected.

The **condition**, for one service (the spans' resource ``service.name``): at least
:data:`MIN_SPANS` such tool spans ending within :data:`WINDOW_SECONDS` of each other (by
the spans' own end times). :class:`UngroupedWatch` decides it for the processor and
``serve`` alike; each adapter logs :func:`warning_text` once per service (logger
``otel_progress``, level WARNING) and counts the spans in its metric (from the spans that
met the condition on, those included). ``otel-progress doctor`` reports the same
condition on a watched run (:mod:`otel_progress.doctor.grouping`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from typing import NamedTuple

from ..conventions.grouping import EXACT_ATTRIBUTE, SESSION_KEYS

__all__ = ["MAX_SERVICES", "MIN_SPANS", "UNKNOWN_SERVICE", "WINDOW_SECONDS", "UngroupedWatch", "Verdict",
           "warning_text"]

#: Root tool spans naming no conversation, from one service, before the set-up is said to
#: form no runs (one alone is not a problem).
MIN_SPANS = 3
#: ... ending within this many seconds of each other (span end times).
WINDOW_SECONDS = 300.0
#: Services followed at once; the one seen least recently is forgotten past it.
MAX_SERVICES = 1024
#: The name used for spans whose resource has no ``service.name``.
UNKNOWN_SERVICE = "unknown_service"


class Verdict(NamedTuple):
    """What one ungrouped root tool span does: ``count`` spans to add to the metric now
    (0 until the condition is met, then all of them at once, then 1 each), and ``warn``:
    the condition was met just now (log the warning)."""

    count: int
    warn: bool


_NOTHING = Verdict(0, False)
_ONE = Verdict(1, False)


class UngroupedWatch:
    """Per service, the end times of its last :data:`MIN_SPANS` ungrouped root tool spans
    until the condition is met, then only that it was. Thread-safe; bounded to
    ``max_services`` services (a service forgotten and seen again may be warned about
    again)."""

    def __init__(self, min_spans: int = MIN_SPANS, window_s: float = WINDOW_SECONDS,
                 max_services: int = MAX_SERVICES) -> None:
        self.min_spans = max(2, int(min_spans))
        self.window_ns = int(window_s * 1e9)
        self._max = max(1, int(max_services))
        self._lock = threading.Lock()
        # service -> end times of its recent spans (None: the condition was met)
        self._services: OrderedDict[str, deque[int] | None] = OrderedDict()

    def seen(self, service: str | None, end_ns: int) -> Verdict:
        """A tool span that is the root of its trace and names no conversation ended at
        ``end_ns`` (ns since the epoch) in ``service``."""
        name = service or UNKNOWN_SERVICE
        services = self._services
        with self._lock:
            if name in services:
                services.move_to_end(name)
                times = services[name]
                if times is None:
                    return _ONE
            else:
                times = services[name] = deque(maxlen=self.min_spans)
                if len(services) > self._max:
                    services.popitem(last=False)
            times.append(int(end_ns or 0))
            if len(times) < self.min_spans or max(times) - min(times) > self.window_ns:
                return _NOTHING
            services[name] = None
            return Verdict(self.min_spans, True)

    def __len__(self) -> int:
        """Services followed now."""
        return len(self._services)

    def met(self, service: str | None) -> bool:
        """Whether the condition was met for ``service`` (and it is still followed)."""
        with self._lock:
            return self._services.get(service or UNKNOWN_SERVICE, False) is None


def warning_text(service: str | None, count: int, window_s: float, metric: str) -> str:
    """The warning an adapter logs once per service when the condition is met (``metric``:
    the adapter's counter of these spans)."""
    keys = " or ".join(SESSION_KEYS)
    return (f"otel-progress: service {service or UNKNOWN_SERVICE!r} sent {count} tool spans within {window_s:g} s"
            f" that are each the root of a trace of their own and name no conversation ({keys}), so each"
            " is a run of its own and a loop across them cannot be detected. Set"
            f" {EXACT_ATTRIBUTE} on these tool spans (e.g. put it in the baggage and add"
            " BaggageSpanProcessor from opentelemetry-processor-baggage), or call the tools of one"
            " conversation under an invoke_agent span (or any span of your own) so that they share a trace;"
            f" see docs/runs.md, 'Grouping runs without an agent span'. Such spans are counted in {metric}."
            " (Logged once per service.)")
