"""The sink's counters are exact under any arrival order (issue 28, item 1), with real
components only: the gateway Collector (collector-config/gateway.yaml) sharding over two
``otel-progress serve`` replicas, into the sink Collector (collector-config/sink.yaml).

Traffic that the sink's counters used to lose (the count connector stamps each delta with
its spans' own times, and delta_to_cumulative drops a delta not newer than the last one of
its stream):

* a burst: many exports at once, through the gateway, and detection log records straight
  to the sink's gateway path (as the in-process processor sends them);
* replays: the same spans again under new trace ids (repeated timestamps), and a backfill
  whose every batch is older than the one before (non-increasing timestamps);
* a replica outage: one replica killed, traffic with skewed clocks meanwhile (the gateway
  queues the batches for the dead replica), the replica restarted: the queued batches are
  redelivered in a burst.

Asserts that every counter the alerts and dashboard read (progress_spans_seen_total,
progress_detection_events_total, progress_detected_spans_total,
progress_evaluation_results_total) equals, per label set, what the sink's files hold.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.service.helpers import (
    free_port,
    http_get,
    loop_trace,
    progressing_trace,
    prom_value,
    request,
    wait_until,
)

from .conftest import REPO, Procs
from .sink_counts import EVENT, Key, attrs, diff, docs, file_counts, metric_counts

pytestmark = pytest.mark.timeout(600)

CONFIG = REPO / "collector-config"
HOUR = 3600 * 10**9


# -- traffic ------------------------------------------------------------------------------------


def _shifted(spans: list[Any], by_ns: int) -> list[Any]:
    for s in spans:
        s.start_time_unix_nano += by_ns
        s.end_time_unix_nano += by_ns
    return spans


def _run_request(n: int, shift_ns: int = 0) -> Any:
    """Trace 2n+2 loops (serve detects it), trace 2n+3 progresses; all spans at fixed times
    (tests.service.helpers.T0), moved by ``shift_ns``: every request repeats the others'
    timestamps unless shifted."""
    spans = _shifted(loop_trace(2 * n + 2) + progressing_trace(2 * n + 3), shift_ns)
    return request(spans, service=f"svc-{n % 3}")


def _export(endpoint: str, req: Any) -> None:
    with grpc.insecure_channel(endpoint) as channel:
        channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                            request_serializer=lambda r: r.SerializeToString(),
                            response_deserializer=lambda b: b)(req, timeout=30)


def _at_once(calls: Iterable[Callable[[], None]]) -> None:
    """Run the calls concurrently, one thread each; fail on any error."""
    errors: list[BaseException] = []

    def run(call: Callable[[], None]) -> None:
        try:
            call()
        except Exception as exc:  # reported below, in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def _detection_record(url: str, i: int, time_ns: int, coding: bool = False) -> None:
    """One detection record stamped ``time_ns``, through the gateway's logs pipeline
    (straight to the sink): a gen_ai.evaluation.result record as the in-process processor
    sends it, or (``coding``) a coding agent's progress.no_progress record."""
    reason = ("repeat_cycle", "frequency", "barren")[i % 3]
    attributes: list[tuple[str, dict[str, str]]] = [
        ("progress.reason", {"stringValue": reason}), ("progress.level", {"intValue": str(1 + i % 2)}),
        ("progress.scope", {"stringValue": "agent"})]
    if not coding:
        attributes += [("event.name", {"stringValue": EVENT}),
                       ("gen_ai.evaluation.name", {"stringValue": "progress.no_progress"}),
                       ("progress.event", {"stringValue": "no_progress"})]
    record = {"timeUnixNano": str(time_ns), "eventName": "progress.no_progress" if coding else EVENT,
              "traceId": f"{10**6 + i:032x}", "spanId": f"{i + 1:016x}", "severityNumber": 13,
              "severityText": "WARN", "attributes": [{"key": k, "value": v} for k, v in attributes]}
    body = {"resourceLogs": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "coding-agent" if coding else "in-process"}}]},
        "scopeLogs": [{"scope": {"name": "otel_progress"}, "logRecords": [record]}]}]}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()


# -- the pipeline ------------------------------------------------------------------------------


class Pipeline:
    """Sink, two serve replicas and the gateway on free loopback ports."""

    def __init__(self, procs: Procs, otelcol: str, tmp: Path, configs: tuple[str, ...]) -> None:
        self.procs = procs
        self.configs = configs
        self.otelcol = otelcol
        self.ports = {name: free_port() for name in (
            "sink_grpc", "sink_http", "sink_prom", "sink_health", "sink_tel",
            "gw_grpc", "gw_http", "gw_health", "gw_tel", "a", "a_health", "b", "b_health")}
        self.traces_file = tmp / "sink" / "traces.jsonl"
        self.logs_file = tmp / "sink" / "logs.jsonl"

    def url(self, key: str, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.ports[key]}{path}"

    def start_sink(self) -> None:
        p = self.ports
        argv = [self.otelcol] + [a for c in self.configs for a in ("--config", str(CONFIG / c))]
        self.procs.start("sink", argv, env={
            "OTEL_PROGRESS_TELEMETRY_HOST": "127.0.0.1",
            "OTEL_PROGRESS_SINK_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{p['sink_grpc']}",
            "OTEL_PROGRESS_SINK_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{p['sink_http']}",
            "OTEL_PROGRESS_SINK_PROMETHEUS_ENDPOINT": f"127.0.0.1:{p['sink_prom']}",
            "OTEL_PROGRESS_SINK_TRACES_FILE": str(self.traces_file),
            "OTEL_PROGRESS_SINK_LOGS_FILE": str(self.logs_file),
            "OTEL_PROGRESS_SINK_HEALTH_ENDPOINT": f"127.0.0.1:{p['sink_health']}",
            "OTEL_PROGRESS_SINK_TELEMETRY_PORT": str(p["sink_tel"]),
        })

    def start_replica(self, name: str) -> None:
        p = self.ports
        self.procs.start(f"replica-{name}", [sys.executable, "-m", "otel_progress.cli", "serve"], env={
            "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "OTEL_PROGRESS_SERVE_LISTEN": f"127.0.0.1:{p[name]}",
            "OTEL_PROGRESS_SERVE_HEALTH_LISTEN": f"127.0.0.1:{p[name + '_health']}",
            "OTEL_PROGRESS_SERVE_FORWARD_ENDPOINT": f"127.0.0.1:{p['sink_grpc']}",
            "OTEL_PROGRESS_SERVE_INSTANCE_ID": f"replica-{name}",
        })

    def replica_ready(self, name: str) -> bool:
        return http_get(self.url(name + "_health", "/readyz"))[0] == 200

    def start_gateway(self) -> None:
        p = self.ports
        self.procs.start("gateway", [self.otelcol, "--config", str(CONFIG / "gateway.yaml")], env={
            "OTEL_PROGRESS_TELEMETRY_HOST": "127.0.0.1",
            "OTEL_PROGRESS_GATEWAY_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{p['gw_grpc']}",
            "OTEL_PROGRESS_GATEWAY_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{p['gw_http']}",
            "OTEL_PROGRESS_REPLICAS": f"[127.0.0.1:{p['a']}, 127.0.0.1:{p['b']}]",
            "OTEL_PROGRESS_SINK_ENDPOINT": f"127.0.0.1:{p['sink_grpc']}",
            "OTEL_PROGRESS_GATEWAY_HEALTH_ENDPOINT": f"127.0.0.1:{p['gw_health']}",
            "OTEL_PROGRESS_GATEWAY_TELEMETRY_PORT": str(p["gw_tel"]),
        })

    def wait_ready(self, what: str, check: Callable[[], bool]) -> None:
        if not wait_until(check, 60, 0.2):
            pytest.fail(f"{what} not ready within 60s\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{self.procs.log(n)}" for n in self.procs.procs)

    def start_all(self) -> None:
        self.start_sink()
        self.start_replica("a")
        self.start_replica("b")
        self.wait_ready("sink", lambda: http_get(self.url("sink_health"))[0] == 200)
        self.wait_ready("replicas", lambda: self.replica_ready("a") and self.replica_ready("b"))
        self.start_gateway()  # after the replicas: a refused first dial would put it in backoff
        self.wait_ready("gateway", lambda: http_get(self.url("gw_health"))[0] == 200)

    def records(self) -> Counter[str]:
        """Log records in the sink's logs file, per service.name."""
        return Counter(attrs(rl.get("resource", {}).get("attributes")).get("service.name", "")
                       for doc in docs(self.logs_file) for rl in doc.get("resourceLogs", ())
                       for sl in rl.get("scopeLogs", ()) for _ in sl.get("logRecords", ()))

    def wait_arrived(self, spans: set[tuple[str, str]], records: dict[str, int], serve_records: int) -> None:
        """Every span sent is in the traces file, and the logs file holds ``records`` (per
        service) and at least ``serve_records`` more (serve's); then a little more time for
        anything still in flight (the file exporter flushes every second)."""
        if not wait_until(lambda: spans <= set(self.span_keys()), 150, 1.0):
            missing = spans - set(self.span_keys())
            pytest.fail(f"{len(missing)} of {len(spans)} spans never reached the sink\n{self.logs()}")

        def all_records() -> bool:
            got = self.records()
            return (all(got[k] == v for k, v in records.items())
                    and got.total() - sum(records.values()) >= serve_records)

        assert wait_until(all_records, 30, 0.5), f"the detection records did not all arrive: {self.records()}"
        time.sleep(3.0)

    def span_keys(self) -> Counter[tuple[str, str]]:
        return Counter((s["traceId"], s["spanId"]) for doc in docs(self.traces_file)
                       for rs in doc.get("resourceSpans", ()) for ss in rs.get("scopeSpans", ())
                       for s in ss.get("spans", ()))


def _send_traffic(pipe: Pipeline) -> set[tuple[str, str]]:
    """Bursts, replays, a backfill and a replica outage (module docstring); returns the
    (trace id, span id) of every span sent."""
    gateway = f"127.0.0.1:{pipe.ports['gw_grpc']}"
    logs_url = pipe.url("gw_http", "/v1/logs")
    now = time.time_ns()
    sent: list[Any] = []

    def send(req: Any) -> Callable[[], None]:
        sent.append(req)
        return lambda: _export(gateway, req)

    # 1. a burst: 40 exports at once, every one with the same span times, and 40 detection
    #    records at once (in-process and coding agents'), through the gateway's logs
    #    pipeline straight to the sink, all with one time
    _at_once([send(_run_request(n)) for n in range(40)]
             + [lambda i=i: _detection_record(logs_url, i, now, coding=i % 2 == 1) for i in range(40)])
    # 2. replays: the same spans under new trace ids (repeated timestamps), 8 at a time,
    #    then a backfill: every batch an hour older than the one before
    for first in range(40, 80, 8):
        _at_once([send(_run_request(n)) for n in range(first, first + 8)])
    for k, n in enumerate(range(80, 90)):
        send(_run_request(n, shift_ns=-(k + 1) * HOUR))()
        _detection_record(logs_url, 100 + k, now - (k + 1) * HOUR, coding=k % 2 == 1)
    # 3. an outage of replica b: the gateway queues its batches (agents with skewed clocks,
    #    hours apart either way), then redelivers them in a burst when b is back
    pipe.procs.stop("replica-b", signal.SIGKILL)
    before = len(pipe.procs.log("gateway", tail=1_000_000))
    for k, n in enumerate(range(90, 120)):
        send(_run_request(n, shift_ns=((-1) ** k) * (k % 7) * HOUR))()
    tried = f"127.0.0.1:{pipe.ports['b']}"
    assert wait_until(lambda: tried in pipe.procs.log("gateway", tail=1_000_000)[before:], 20, 0.5), \
        "the gateway never tried the dead replica: no batch was queued for it"
    time.sleep(2.0)
    pipe.start_replica("b")
    pipe.wait_ready("replica b after the outage", lambda: pipe.replica_ready("b"))
    return {(s.trace_id.hex(), s.span_id.hex()) for req in sent for rs in req.resource_spans
            for ss in rs.scope_spans for s in ss.spans}


@pytest.mark.parametrize("configs", [("sink.yaml",), ("sink.yaml", "sink-logs.yaml")],
                         ids=["sink", "sink+logs"])
def test_every_sink_counter_equals_the_sinks_files_under_bursts_replays_and_redelivery(
        otelcol_binary: str, procs: Procs, tmp_path: Path, configs: tuple[str, ...]) -> None:
    pipe = Pipeline(procs, otelcol_binary, tmp_path, configs)
    pipe.start_all()
    wanted = _send_traffic(pipe)
    pipe.wait_arrived(wanted, records={"in-process": 25, "coding-agent": 25}, serve_records=120)

    # -- every counter equals what the files hold, per label set ---------------------------------
    def compare() -> tuple[dict[str, Counter[Key]], dict[str, Counter[Key]]]:
        return (file_counts(pipe.traces_file, pipe.logs_file, "sink-logs.yaml" in configs),
                metric_counts(http_get(pipe.url("sink_prom", "/metrics"))[1]))

    wait_until(lambda: (lambda w, g: w == g)(*compare()), 30, 1.0)
    want, got = compare()
    assert want["progress_spans_seen_total"] and want["progress_detection_events_total"]
    assert want["progress_detected_spans_total"] and want["progress_evaluation_results_total"]
    assert sum(want["progress_spans_seen_total"].values()) >= len(wanted)
    assert got == want, "\n".join(diff(want, got))
    print("\n".join(line for line in diff(want, got) if "in all" in line))


def _metric_export(url: str, service: str, start_ns: int, time_ns: int, value: int, delta: bool) -> None:
    """One OTLP/HTTP metrics export as an agent's SDK pushes it (the gateway passes it on as is):
    ``progress.detections`` as a delta sum, or ``progress.wasted.tokens`` as a cumulative one."""
    point = {"startTimeUnixNano": str(start_ns), "timeUnixNano": str(time_ns), "asInt": str(value),
             "attributes": [{"key": "progress.reason", "value": {"stringValue": "repeat_cycle"}}]}
    metric = {"name": "progress.detections" if delta else "progress.wasted.tokens",
              "unit": "{detection}" if delta else "{token}",
              "sum": {"aggregationTemporality": 1 if delta else 2, "isMonotonic": True, "dataPoints": [point]}}
    body = {"resourceMetrics": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": service}}]},
        "scopeMetrics": [{"scope": {"name": "otel_progress"}, "metrics": [metric]}]}]}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()


def test_agents_delta_counters_pushed_to_the_sink_count_every_export(otelcol_binary: str, procs: Procs,
                                                                     tmp_path: Path) -> None:
    # metrics/in: an SDK set to delta temporality pushes progress.detections; concurrent
    # exports with one time, and a backfill with older and older times, all count.  A
    # cumulative counter passes through unchanged (its last value).
    pipe = Pipeline(procs, otelcol_binary, tmp_path, ("sink.yaml",))
    pipe.start_sink()
    pipe.wait_ready("sink", lambda: http_get(pipe.url("sink_health"))[0] == 200)
    url = pipe.url("sink_http", "/v1/metrics")
    now = time.time_ns()
    _at_once([lambda i=i: _metric_export(url, f"agent-{i % 2}", now - 10**9, now, 1, delta=True)
              for i in range(40)])
    for k in range(10):
        _metric_export(url, "agent-0", now - (k + 2) * HOUR, now - (k + 1) * HOUR, 2, delta=True)
    for value in (10, 20, 30):
        _metric_export(url, "agent-1", now - HOUR, now + value, value, delta=False)
    want = {"agent-0": 20 + 10 * 2, "agent-1": 20}

    def counted() -> dict[str, float]:
        text = http_get(pipe.url("sink_prom", "/metrics"))[1]
        return {s: prom_value(text, "progress_detections_total", {"service_name": s}) for s in want}

    wait_until(lambda: counted() == want, 20, 0.5)
    assert counted() == want
    text = http_get(pipe.url("sink_prom", "/metrics"))[1]
    assert prom_value(text, "progress_wasted_tokens_total", {"service_name": "agent-1"}) == 30
