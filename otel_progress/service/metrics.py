"""The service's self-metrics: counters and gauges kept in process, rendered as
Prometheus text on the health port (``/metrics``) and, when an OTLP metrics endpoint is
configured, exported as OTLP cumulative sums and gauges.

OpenTelemetry names (OTLP) use dots, e.g. ``progress.service.spans.received``; the
Prometheus names replace dots with underscores and add ``_total`` to counters, e.g.
``progress_service_spans_received_total``. docs/service.md lists every metric.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.resource.v1 import resource_pb2

from .otlp import key_values

__all__ = ["METRICS", "MetricDef", "ServiceMetrics"]

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class MetricDef:
    name: str  # OpenTelemetry name
    kind: str  # "counter" | "gauge"
    unit: str
    description: str

    @property
    def prom_name(self) -> str:
        base = self.name.replace(".", "_")
        if self.unit == "s":
            base += "_seconds"
        return base + "_total" if self.kind == "counter" else base


#: Every metric the service reports (name, kind, unit, description).
METRICS: tuple[MetricDef, ...] = (
    MetricDef("progress.service.requests", "counter", "1",
              "Export requests answered, by result (ok, unavailable, invalid_argument, unauthenticated)."),
    MetricDef("progress.service.request.duration", "counter", "s",
              "Total time spent answering Export requests (divide by requests for the mean)."),
    MetricDef("progress.service.spans.received", "counter", "1", "Spans received in Export requests."),
    MetricDef("progress.service.spans.genai", "counter", "1",
              "Spans read as tool, agent or model calls (the rest are forwarded unparsed)."),
    MetricDef("progress.service.spans.unreadable", "counter", "1",
              "Spans that may be tool, agent or model calls but could not be decoded (bad ids, bad encoding,"
              " or values nested past the protobuf runtime's recursion limit); not analysed, forwarded as"
              " they came."),
    MetricDef("progress.service.spans.late", "counter", "1",
              "Late spans: tool calls that started before their run's latest step, and GenAI spans of a"
              " trace already closed or evicted. They are folded into state."),
    MetricDef("progress.service.spans.duplicate", "counter", "1",
              "GenAI spans delivered again (Collector retries); re-annotated, not re-evaluated."),
    MetricDef("progress.service.tool_calls", "counter", "1", "Tool calls given to the engine."),
    MetricDef("progress.service.log_records.received", "counter", "1",
              "Log records received in LogsService/Export requests (coding agents' events, docs/logs.md)."),
    MetricDef("progress.service.log_records.read", "counter", "1",
              "Log records a coding-agent reader read as a tool call or a token count."),
    MetricDef("progress.service.log_records.unreadable", "counter", "1",
              "Log records with an event name a reader knows that could not be decoded (bad encoding, or"
              " values nested past the protobuf runtime's recursion limit); forwarded as they came, not"
              " read."),
    MetricDef("progress.service.detections", "counter", "1",
              "Detections, by progress.reason, progress.level, progress.scope and progress.event."),
    MetricDef("progress.service.detections.detached", "counter", "1",
              "Detections whose span (or log record) was not in the batch that produced them (written as an"
              " annotation span instead of on the span; for log input, records in a resource of their own,"
              " or sent through the logs queue when the run ended idle)."),
    MetricDef("progress.service.detections.logged", "counter", "1",
              "Detections written as gen_ai.evaluation.result log records (--detection-events log or both):"
              " those found in traces and in log runs that ended idle queued (their delivery is counted in"
              " progress.service.tap.* with signal=logs), those found in log input added to its request."),
    MetricDef("progress.service.batches.replayed", "counter", "1",
              "Requests whose exact bytes were answered before (a retry); answered from the digest cache."),
    MetricDef("progress.service.batches.annotated", "counter", "1",
              "Requests forwarded re-serialised because they gained an annotation."),
    MetricDef("progress.service.traces.evicted_early", "counter", "1",
              "Traces dropped from state before their root span arrived, by reason: max_traces,"
              " memory_budget (max state MiB) or max_runs (the engine's)."),
    MetricDef("progress.service.traces.expired", "counter", "1",
              "Traces dropped after the idle TTL without their root span."),
    MetricDef("progress.service.traces.completed", "counter", "1",
              "Traces closed after their root span arrived (and the close delay passed)."),
    MetricDef("progress.service.traces.merged", "counter", "1",
              "Traces analysed again whole because a request brought a late span or settled a provisional"
              " run otherwise than guessed (within --merge-window; docs/runs.md)."),
    MetricDef("progress.service.log_runs.ended_early", "counter", "1",
              "Log runs ended before they were idle, by reason: max_runs (the engine's) or memory_budget"
              " (--max-state-mib). Each is ended through the engine: what it found is kept."),
    MetricDef("progress.service.wasted.turns", "counter", "{turn}",
              "Turns runs spent after their first detection, counted when the run ends, by gen_ai.agent.name."),
    MetricDef("progress.service.wasted.tokens", "counter", "{token}",
              "Tokens runs burned after their first detection, counted when the run ends, by gen_ai.agent.name."),
    MetricDef("progress.service.wasted.input_tokens", "counter", "{token}",
              "Input tokens of the model calls in runs' wasted stretches (from the last progress before the first"
              " detection to the run's end: each wasted step read the whole context again), counted when the run"
              " ends, by gen_ai.agent.name."),
    MetricDef("progress.service.state.traces", "gauge", "1", "Traces held in state."),
    MetricDef("progress.service.state.runs", "gauge", "1", "Agent runs held in the engine."),
    MetricDef("progress.service.state.spans", "gauge", "1", "Spans remembered in per-trace lineage tables."),
    MetricDef("progress.service.state.bytes", "gauge", "By",
              "Estimated bytes of the state held, traces and log runs (what --max-state-mib bounds)."),
    MetricDef("progress.service.state.log_runs", "gauge", "1", "Runs of log input held."),
    MetricDef("progress.service.state.continued", "counter", "1",
              "Open traces continued from state another process wrote, by source: checkpoint (--state-dir, at"
              " start) or store (--state-store, a trace another replica held)."),
    MetricDef("progress.service.state.stored", "counter", "1",
              "Trace states written to the state store (--state-store), one per trace a batch touched."),
    MetricDef("progress.service.state.busy", "counter", "1",
              "Traces of a batch still marked as being evaluated by another replica after waiting a second for"
              " it (--state-store): evaluated with the state read then."),
    MetricDef("progress.service.state.stale", "counter", "1",
              "Trace states not written to the store because another replica wrote the trace since this one"
              " read it (--state-store): the newer one is kept, and read before this replica's next batch of it."),
    MetricDef("progress.service.state.checkpoints", "counter", "1", "Checkpoints written (--state-dir)."),
    MetricDef("progress.service.state.ignored", "counter", "1",
              "Checkpoints and store entries ignored (corrupt, or written by another version, hash seed or"
              " digest key: an empty start for them), by source: checkpoint or store."),
    MetricDef("progress.service.state.errors", "counter", "1",
              "State that could not be written or read, by op: read, write (the store could not be reached,"
              " or a state could not be written) or checkpoint (the file could not be written)."),
    MetricDef("progress.service.forward.failures", "counter", "1",
              "Forwards to the downstream endpoint that failed, by gRPC code and outcome (retry: answered"
              " UNAVAILABLE, the sender retries; permanent: answered with the downstream's code, dropped)."),
    MetricDef("progress.service.forward.dropped", "counter", "1",
              "Spans in batches the downstream rejected permanently (not retried)."),
    MetricDef("progress.service.forward.split", "counter", "1",
              "Requests forwarded as several, because they were over --forward-max-mib or the downstream"
              " answered RESOURCE_EXHAUSTED without RetryInfo (too large)."),
    MetricDef("progress.service.refused", "counter", "1",
              "Requests refused at admission (max inflight requests or MiB), answered UNAVAILABLE with"
              " RetryInfo before any work."),
    MetricDef("progress.service.inflight", "gauge", "1", "Export requests being handled."),
    MetricDef("progress.service.tap.exported", "counter", "1",
              "Findings sent by tap mode, by signal: annotation spans (traces) and detection log records (logs)."),
    MetricDef("progress.service.tap.failures", "counter", "1", "Failed tap exports (retried), by signal."),
    MetricDef("progress.service.tap.dropped", "counter", "1",
              "Findings tap mode gave up on, by signal and reason: queue_full, rejected (a permanent failure),"
              " retries_exhausted, shutdown (not sent within --drain-timeout)."),
    MetricDef("progress.service.health.refused", "counter", "1",
              "Health-port connections closed before an answer, by reason: shed (it had sent no complete request"
              " when a newer connection needed its place) or busy (every connection was being answered)."),
    MetricDef("progress.service.setup.ungrouped_spans", "counter", "1",
              "Tool spans that are each the root of a trace of their own and name no conversation (no"
              " gen_ai.conversation.id or session.id), so loops across them cannot be detected, by service.name;"
              " counted once their service sent 3 within 5 minutes (docs/runs.md)."),
    MetricDef("progress.service.errors", "counter", "1",
              "Internal errors while detecting (the batch is forwarded unannotated)."),
)

_BY_NAME = {m.name: m for m in METRICS}


def _labels(attrs: Mapping[str, object] | None) -> Labels:
    if not attrs:
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in attrs.items()))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@dataclass
class _Series:
    values: dict[Labels, float] = field(default_factory=dict)


class ServiceMetrics:
    """Thread-safe in-process metrics. ``add`` for counters, ``set`` for gauges; gauges
    may also be callbacks registered with :meth:`gauge_callback`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[str, _Series] = {m.name: _Series() for m in METRICS}
        self._callbacks: dict[str, Callable[[], float]] = {}
        self.start_ns = time.time_ns()

    def add(self, name: str, value: float = 1, attrs: Mapping[str, object] | None = None) -> None:
        if not value:
            return
        key = _labels(attrs)
        with self._lock:
            values = self._series[name].values
            values[key] = values.get(key, 0) + value

    def set(self, name: str, value: float, attrs: Mapping[str, object] | None = None) -> None:
        with self._lock:
            self._series[name].values[_labels(attrs)] = value

    def gauge_callback(self, name: str, fn: Callable[[], float]) -> None:
        self._callbacks[name] = fn

    def value(self, name: str, attrs: Mapping[str, object] | None = None) -> float:
        """The current value of one series (0 if never recorded); sums all series of the
        metric when ``attrs`` is None."""
        if name in self._callbacks and attrs is None:
            return float(self._callbacks[name]())
        with self._lock:
            values = self._series[name].values
            if attrs is None:
                return float(sum(values.values()))
            return float(values.get(_labels(attrs), 0))

    def snapshot(self) -> list[tuple[MetricDef, list[tuple[Labels, float]]]]:
        gauges = {}
        for name, fn in self._callbacks.items():
            try:
                gauges[name] = float(fn())
            except Exception:  # a gauge must never break a scrape
                gauges[name] = 0.0
        with self._lock:
            out = []
            for m in METRICS:
                if m.name in gauges:
                    out.append((m, [((), gauges[m.name])]))
                else:
                    out.append((m, sorted(self._series[m.name].values.items())))
            return out

    # -- rendering ---------------------------------------------------------------------

    def prometheus_text(self) -> str:
        """The Prometheus text exposition format (version 0.0.4)."""
        lines: list[str] = []
        for m, series in self.snapshot():
            name = m.prom_name
            lines.append(f"# HELP {name} {m.description}")
            lines.append(f"# TYPE {name} {m.kind}")
            if not series:
                series = [((), 0.0)]
            for labels, value in series:
                label_text = ",".join(f'{k.replace(".", "_")}="{_escape(v)}"' for k, v in labels)
                rendered = repr(float(value)) if not float(value).is_integer() else str(int(value))
                lines.append(f"{name}{{{label_text}}} {rendered}" if label_text else f"{name} {rendered}")
        return "\n".join(lines) + "\n"

    def otlp_request(self, resource: Mapping[str, object],
                     extra: Iterable[tuple[MetricDef, list[tuple[Labels, float]]]] = ()
                     ) -> metrics_service_pb2.ExportMetricsServiceRequest:
        """All metrics as one OTLP request: counters as cumulative monotonic sums."""
        now = time.time_ns()
        sm = metrics_pb2.ScopeMetrics(scope=common_pb2.InstrumentationScope(name="otel-progress.service"))
        for m, series in [*self.snapshot(), *extra]:
            if not series:
                continue
            metric = sm.metrics.add(name=m.name, description=m.description, unit=m.unit)
            if m.kind == "counter":
                metric.sum.aggregation_temporality = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
                metric.sum.is_monotonic = True
                points = metric.sum.data_points
            else:
                points = metric.gauge.data_points
            for labels, value in series:
                p = points.add(start_time_unix_nano=self.start_ns, time_unix_nano=now)
                if float(value).is_integer():
                    p.as_int = int(value)
                else:
                    p.as_double = float(value)
                p.attributes.extend(key_values(dict(labels)))
        rm = metrics_pb2.ResourceMetrics(resource=resource_pb2.Resource(attributes=key_values(dict(resource))))
        rm.scope_metrics.append(sm)
        return metrics_service_pb2.ExportMetricsServiceRequest(resource_metrics=[rm])


def metric(name: str) -> MetricDef:
    """The definition of a metric by its OpenTelemetry name."""
    return _BY_NAME[name]
