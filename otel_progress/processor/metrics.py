"""The processor's metrics, through the OpenTelemetry metrics API.

Instruments are created once per processor from ``meter_provider`` (default: the global
provider, so the distro's ``MeterProvider`` under ``opentelemetry-instrument``; a meter
taken before the SDK is installed is a proxy that binds to it later). Attributes are
low-cardinality only: reason, level, scope, agent name and tool name, never ids,
arguments or results. Agent and tool names are capped at :data:`MAX_NAMES` distinct
values each; later names are reported as ``_other``; every attribute value is at most
:data:`~otel_progress.model.limits.MAX_METRIC_CHARS` (256) characters (longer ones are cut,
ending with ``…``).

====================================  ============  ==============================================
name                                  unit          attributes
====================================  ============  ==============================================
``progress.detections``               {detection}   progress.reason, progress.level, progress.scope,
                                                    gen_ai.agent.name, gen_ai.tool.name (absent on
                                                    run-scope detections: no one tool)
``progress.wasted.turns``             {turn}        gen_ai.agent.name
``progress.wasted.tokens``            {token}       gen_ai.agent.name
``progress.wasted.input_tokens``      {token}       gen_ai.agent.name
``progress.processor.errors``         {error}       error.type
``progress.hook.errors``              {error}       error.type
``progress.runs.active``              {run}         (observable gauge)
``progress.runs.evicted``             {run}         (none)
``progress.analysis.queued``          {item}        (observable gauge; background analysis only)
``progress.analysis.full``            {span}        progress.queue.action (``waited``, ``overflow``)
``progress.setup.ungrouped_spans``    {span}        service.name (root tool spans naming no
                                                    conversation: docs/processor.md)
====================================  ============  ==============================================
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import metrics

from ..model import Detection
from ..model.limits import MAX_METRIC_CHARS, clip_chars, metric_value

__all__ = ["MAX_NAMES", "METRIC_NAMES", "ProgressMetrics"]

#: Distinct agent names and tool names reported before the rest become ``_other``.
MAX_NAMES = 200

METRIC_NAMES = (
    "progress.detections",
    "progress.wasted.turns",
    "progress.wasted.tokens",
    "progress.wasted.input_tokens",
    "progress.processor.errors",
    "progress.hook.errors",
    "progress.runs.active",
    "progress.runs.evicted",
    "progress.analysis.queued",
    "progress.analysis.full",
    "progress.setup.ungrouped_spans",
)

_OTHER = "_other"
_UNKNOWN = "unknown"


class _NameCap:
    """Keeps an attribute's cardinality bounded: the first ``limit`` distinct values pass."""

    def __init__(self, limit: int) -> None:
        self._seen: set[str] = set()
        self._limit = limit
        self._lock = threading.Lock()

    def __call__(self, value: str | None) -> str:
        if not value:
            return _UNKNOWN
        if len(value) > MAX_METRIC_CHARS:
            value = clip_chars(value, MAX_METRIC_CHARS)
        if value in self._seen:
            return value
        with self._lock:
            if len(self._seen) < self._limit:
                self._seen.add(value)
                return value
        return _OTHER


class ProgressMetrics:
    """The processor's instruments. Recording never raises."""

    def __init__(
        self,
        meter_provider: metrics.MeterProvider | None = None,
        active_runs: Callable[[], int] | None = None,
        queued: Callable[[], int] | None = None,
    ) -> None:
        from ..model.version import __version__

        meter = metrics.get_meter("otel_progress", __version__, meter_provider=meter_provider)
        self._agents = _NameCap(MAX_NAMES)
        self._tools = _NameCap(MAX_NAMES)
        self._services = _NameCap(MAX_NAMES)
        self._active_runs = active_runs
        self._queued = queued
        self.detections = meter.create_counter(
            "progress.detections", unit="{detection}",
            description="Detections of agent runs that stopped making progress.",
        )
        self._wasted_counters(meter)
        self.errors = meter.create_counter(
            "progress.processor.errors", unit="{error}",
            description="Errors caught inside the span processor (never raised to the application).",
        )
        self.hook_errors = meter.create_counter(
            "progress.hook.errors", unit="{error}",
            description="Exceptions raised by the on_detection hook (caught).",
        )
        self.evicted = meter.create_counter(
            "progress.runs.evicted", unit="{run}",
            description="Runs dropped before they ended: idle past the TTL or over the run cap.",
        )
        self.ungrouped = meter.create_counter(
            "progress.setup.ungrouped_spans", unit="{span}",
            description="Tool spans that are each the root of a trace of their own and name no conversation, so"
                        " loops across them cannot be detected (counted once their service sent 3 within 5 minutes).",
        )
        meter.create_observable_gauge(
            "progress.runs.active", callbacks=[self._observe_active], unit="{run}",
            description="Agent runs currently tracked by the processor.",
        )
        self.full: metrics.Counter | None = None
        if queued is not None:  # background analysis
            meter.create_observable_gauge(
                "progress.analysis.queued", callbacks=[self._observe_queued], unit="{item}",
                description="Span starts and ends waiting for the background analysis worker.",
            )
            self.full = meter.create_counter(
                "progress.analysis.full", unit="{span}",
                description="Spans that ended while the background analysis queue was full.",
            )

    def _observe_active(self, _options: Any) -> Iterable[metrics.Observation]:
        if self._active_runs is None:
            return []
        try:
            return [metrics.Observation(int(self._active_runs()))]
        except Exception:  # a callback must not fail the collection
            return []

    def _observe_queued(self, _options: Any) -> Iterable[metrics.Observation]:
        if self._queued is None:
            return []
        try:
            return [metrics.Observation(int(self._queued()))]
        except Exception:
            return []

    def detection(self, det: Detection) -> None:
        with contextlib.suppress(Exception):  # the SDK's counters do not raise; be sure
            attrs: dict[str, Any] = {
                "progress.reason": det.reason.value,
                "progress.level": int(det.level),
                "progress.scope": det.scope.value,
                "gen_ai.agent.name": self._agents(det.agent),
            }
            if det.tool:  # a run-scope detection is about sub-agent invocations, not one tool
                attrs["gen_ai.tool.name"] = self._tools(det.tool)
            self.detections.add(1, attrs)

    def _wasted_counters(self, meter: Any) -> None:
        """The counters of what runs spent after they stopped making progress."""
        self.wasted_turns = meter.create_counter(
            "progress.wasted.turns", unit="{turn}",
            description="Turns a run took after its first detection (counted when the run ends).",
        )
        self.wasted_tokens = meter.create_counter(
            "progress.wasted.tokens", unit="{token}",
            description="Model tokens a run consumed after its first detection (counted when the run ends).",
        )
        self.wasted_input_tokens = meter.create_counter(
            "progress.wasted.input_tokens", unit="{token}",
            description="Input tokens of the model calls in a run's wasted stretch, from its last progress before"
                        " its first detection to its end: each wasted step read the whole context again"
                        " (counted when the run ends).",
        )

    def wasted(self, agent: str | None, turns: int, tokens: int, input_tokens: int = 0) -> None:
        with contextlib.suppress(Exception):
            attrs = {"gen_ai.agent.name": self._agents(agent)}
            if turns > 0:
                self.wasted_turns.add(turns, attrs)
            if tokens > 0:
                self.wasted_tokens.add(tokens, attrs)
            if input_tokens > 0:
                self.wasted_input_tokens.add(input_tokens, attrs)

    def run_summary(self, summary: Any) -> None:
        """A run ended: its wasted turns and tokens, when it ended after a detection."""
        if summary.first_detection_turn is not None:
            self.wasted(summary.agent, summary.wasted_turns, summary.wasted_tokens,
                        getattr(summary, "wasted_input_tokens", 0))

    def error(self, error_type: str) -> None:
        with contextlib.suppress(Exception):
            self.errors.add(1, {"error.type": metric_value(error_type)})

    def hook_error(self, error_type: str) -> None:
        with contextlib.suppress(Exception):
            self.hook_errors.add(1, {"error.type": metric_value(error_type)})

    def runs_evicted(self, count: int) -> None:
        if count > 0:
            with contextlib.suppress(Exception):
                self.evicted.add(count)

    def ungrouped_spans(self, count: int, service: str | None) -> None:
        """Root tool spans of ``service`` that name no conversation (see
        :mod:`otel_progress.runs.ungrouped`)."""
        with contextlib.suppress(Exception):
            self.ungrouped.add(count, {"service.name": self._services(service)})

    def queue_full(self, action: str) -> None:
        """A span ended with the analysis queue full: the thread ``waited`` for room, or
        the item went past the bound (``overflow``) because the worker made no progress."""
        if self.full is not None:
            with contextlib.suppress(Exception):
                self.full.add(1, {"progress.queue.action": action})
