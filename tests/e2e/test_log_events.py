"""End to end, the detections as ``gen_ai.evaluation.result`` log records in span context,
with real components only:

* an instrumented agent's traces -> the gateway Collector (collector-config/gateway.yaml) ->
  ``otel-progress serve`` (inline, ``--detection-events`` both, over real gRPC) -> the sink
  Collector (collector-config/sink.yaml): the spans with their events, and the records on
  serve's logs export;
* an agent under ``opentelemetry-instrument`` with the in-process processor (no trace
  exporter, the SDK's OTLP log exporter) -> the gateway's logs pipeline -> the sink;
* a real Prometheus (Debian's package) scraping the sink with the shipped rules.

Asserts: the sink's logs file holds one record per detection, parented to the span that
carries the span event (and nothing else: a plain log record is not archived); the count
connector's ``progress_evaluation_results_total`` counts them; Prometheus fires
``OtelProgressNoProgressDetected`` once per detection group, with the records' count; the
Loki rules' selectors and filters (loki-rules.yaml), applied to these records as Loki maps
OTLP, select exactly them; the Honeycomb trigger's filter and breakdown columns are the
records' own.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from tests.service.helpers import free_port, http_get, prom_value, wait_until

from .conftest import REPO, Procs, start_prometheus
from .sink_counts import attrs, docs

pytestmark = pytest.mark.timeout(600)

CONFIG = REPO / "collector-config"
ALERTING = CONFIG / "alerting"
AGENT = Path(__file__).with_name("agent.py")
EVENT = "gen_ai.evaluation.result"
INSTRUMENT = str(Path(sys.executable).parent / "opentelemetry-instrument")


# -- reading the sink's files (OTLP/JSON lines of the file exporter) -----------------------


def _records(path: Path) -> list[dict[str, Any]]:
    """Every log record in the sink's logs file, with its resource's attributes."""
    out = []
    for doc in docs(path):
        for rl in doc.get("resourceLogs", ()):
            resource = attrs(rl.get("resource", {}).get("attributes"))
            for sl in rl.get("scopeLogs", ()):
                for rec in sl.get("logRecords", ()):
                    out.append({**rec, "attrs": attrs(rec.get("attributes")), "resource": resource,
                                "scope": sl.get("scope", {}).get("name", "")})
    return out


def _event_spans(path: Path) -> dict[tuple[str, str], list[int]]:
    """(trace id, span id) of every tool span carrying a detection span event -> the turns."""
    out: dict[tuple[str, str], list[int]] = {}
    for doc in docs(path):
        for rs in doc.get("resourceSpans", ()):
            for ss in rs.get("scopeSpans", ()):
                for span in ss.get("spans", ()):
                    if not span["name"].startswith("execute_tool"):
                        continue
                    turns = [int(attrs(e.get("attributes"))["progress.turn"]) for e in span.get("events", ())
                             if e["name"] in ("no_progress", "livelock")]
                    if turns:
                        out[(span["traceId"], span["spanId"])] = turns
    return out


# -- Loki's mapping of OTLP, and the LogQL subset the shipped rules use ---------------------

# Resource attributes Loki stores as index labels by default (its OTLP ingestion docs).
_LOKI_INDEX = {"cloud.availability_zone", "cloud.region", "container.name", "deployment.environment",
               "k8s.cluster.name", "k8s.container.name", "k8s.cronjob.name", "k8s.daemonset.name",
               "k8s.deployment.name", "k8s.job.name", "k8s.namespace.name", "k8s.pod.name",
               "k8s.replicaset.name", "k8s.statefulset.name", "service.instance.id", "service.name",
               "service.namespace"}


def _loki_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", key)


def _loki_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(value, "g") if value != int(value) else str(int(value))
    return str(value)


def _loki_entry(rec: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(stream labels, stream labels + structured metadata) of a record, as Loki stores it."""
    index = {_loki_name(k): _loki_string(v) for k, v in rec["resource"].items() if k in _LOKI_INDEX}
    meta = {_loki_name(k): _loki_string(v) for k, v in rec["resource"].items() if k not in _LOKI_INDEX}
    meta.update({_loki_name(k): _loki_string(v) for k, v in rec["attrs"].items()})
    meta.update({"trace_id": rec.get("traceId", ""), "span_id": rec.get("spanId", ""),
                 "severity_text": rec.get("severityText", ""), "scope_name": rec["scope"]})
    return index, {**meta, **index}


def _match(labels: dict[str, str], name: str, op: str, want: str) -> bool:
    got = labels.get(name, "")
    if op == "=":
        return got == want
    if op == "!=":
        return got != want
    full = re.fullmatch(want, got) is not None
    return full if op == "=~" else not full


def _logql_groups(expr: str, records: list[dict[str, Any]]) -> Counter[tuple[str, ...]]:
    """``sum by (...) (count_over_time({selector} | filter | ... [range]))`` over the records
    (all in range): the count per group. Only the forms the shipped rules use."""
    by = [x.strip() for x in re.search(r"sum by \(([^)]*)\)", expr).group(1).split(",")]  # type: ignore[union-attr]
    inner = re.search(r"count_over_time\((\{[^}]*\})(.*)\[\w+\]\)", expr, re.S)
    assert inner, expr
    matcher = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
    selector = matcher.findall(inner.group(1))
    filters = matcher.findall(inner.group(2))
    assert selector and filters and inner.group(2).count("|") == len(filters), expr
    groups: Counter[tuple[str, ...]] = Counter()
    for rec in records:
        index, labels = _loki_entry(rec)
        if all(_match(index, *m) for m in selector) and all(_match(labels, *f) for f in filters):
            groups[tuple(labels.get(k, "") for k in by)] += 1
    return groups


# -- the test -------------------------------------------------------------------------------


def _plain_log_record(endpoint: str) -> None:
    """A log record that is no detection (a prompt, say): the sink must not archive it."""
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.logs.v1 import logs_pb2
    from opentelemetry.proto.resource.v1 import resource_pb2

    record = logs_pb2.LogRecord(time_unix_nano=1, event_name="app.prompt")
    record.body.string_value = "user prompt: the secret plan"
    req = logs_service_pb2.ExportLogsServiceRequest(resource_logs=[logs_pb2.ResourceLogs(
        resource=resource_pb2.Resource(attributes=[common_pb2.KeyValue(
            key="service.name", value=common_pb2.AnyValue(string_value="plain-app"))]),
        scope_logs=[logs_pb2.ScopeLogs(log_records=[record])])])
    with grpc.insecure_channel(endpoint) as channel:
        channel.unary_unary("/opentelemetry.proto.collector.logs.v1.LogsService/Export",
                            request_serializer=lambda r: r.SerializeToString(),
                            response_deserializer=lambda b: b)(req, timeout=10)


def test_detection_log_records_from_serve_and_the_processor_reach_the_sink_and_fire_the_rules(
        otelcol_binary: str, prometheus_binary: str, procs: Procs, tmp_path: Path) -> None:
    ports = {name: free_port() for name in (
        "sink_grpc", "sink_http", "sink_prom", "sink_health", "sink_tel",
        "gw_grpc", "gw_http", "gw_health", "gw_tel", "serve", "serve_health", "prometheus")}
    traces_file = tmp_path / "sink" / "traces.jsonl"
    logs_file = tmp_path / "sink" / "logs.jsonl"
    common = {"OTEL_PROGRESS_TELEMETRY_HOST": "127.0.0.1"}
    procs.start("sink", [otelcol_binary, "--config", str(CONFIG / "sink.yaml")], env={
        **common,
        "OTEL_PROGRESS_SINK_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{ports['sink_grpc']}",
        "OTEL_PROGRESS_SINK_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{ports['sink_http']}",
        "OTEL_PROGRESS_SINK_PROMETHEUS_ENDPOINT": f"127.0.0.1:{ports['sink_prom']}",
        "OTEL_PROGRESS_SINK_TRACES_FILE": str(traces_file),
        "OTEL_PROGRESS_SINK_LOGS_FILE": str(logs_file),
        "OTEL_PROGRESS_SINK_HEALTH_ENDPOINT": f"127.0.0.1:{ports['sink_health']}",
        "OTEL_PROGRESS_SINK_TELEMETRY_PORT": str(ports["sink_tel"]),
    })
    procs.start("serve", [sys.executable, "-m", "otel_progress.cli", "serve"], env={
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "OTEL_PROGRESS_SERVE_LISTEN": f"127.0.0.1:{ports['serve']}",
        "OTEL_PROGRESS_SERVE_HEALTH_LISTEN": f"127.0.0.1:{ports['serve_health']}",
        "OTEL_PROGRESS_SERVE_FORWARD_ENDPOINT": f"127.0.0.1:{ports['sink_grpc']}",
    })
    procs.start("gateway", [otelcol_binary, "--config", str(CONFIG / "gateway.yaml")], env={
        **common,
        "OTEL_PROGRESS_GATEWAY_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{ports['gw_grpc']}",
        "OTEL_PROGRESS_GATEWAY_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{ports['gw_http']}",
        "OTEL_PROGRESS_REPLICAS": f"[127.0.0.1:{ports['serve']}]",
        "OTEL_PROGRESS_SINK_ENDPOINT": f"127.0.0.1:{ports['sink_grpc']}",
        "OTEL_PROGRESS_GATEWAY_HEALTH_ENDPOINT": f"127.0.0.1:{ports['gw_health']}",
        "OTEL_PROGRESS_GATEWAY_TELEMETRY_PORT": str(ports["gw_tel"]),
    })
    start_prometheus(procs, prometheus_binary, tmp_path / "prometheus", ports["sink_prom"], ports["prometheus"])
    for what, url in (("sink", f"http://127.0.0.1:{ports['sink_health']}/"),
                      ("serve", f"http://127.0.0.1:{ports['serve_health']}/readyz"),
                      ("gateway", f"http://127.0.0.1:{ports['gw_health']}/"),
                      ("prometheus", f"http://127.0.0.1:{ports['prometheus']}/-/ready")):
        if not wait_until(lambda url=url: http_get(url)[0] == 200, 60, 0.25):
            pytest.fail(f"{what} not ready within 60s\n" + "\n".join(f"--- {n}\n{procs.log(n)}" for n in procs.procs))
    assert "gen_ai.evaluation.result log records to the logs endpoint" in procs.log("serve")

    # 1. traces through gateway -> serve -> sink (6 runs, 2 of them loop)
    manifest = tmp_path / "agent.jsonl"
    agent = procs.start("agent", [sys.executable, str(AGENT), "--endpoint", f"127.0.0.1:{ports['gw_grpc']}",
                                  "--runs", "6", "--turns", "6", "--loop-every", "3", "--pace", "0.002",
                                  "--service", "serve-agent", "--manifest", str(manifest)])
    # 2. the in-process processor, zero code: log records only, through the gateway's logs pipeline
    zero = procs.start("zero-code", [INSTRUMENT, sys.executable, "looping_agent.py"], env={
        "OTEL_SERVICE_NAME": "zero-code-agent", "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{ports['gw_grpc']}", "OTEL_EXPORTER_OTLP_INSECURE": "true",
    }, cwd=REPO / "examples" / "zero_code")
    _plain_log_record(f"127.0.0.1:{ports['gw_grpc']}")
    assert agent.wait(120) == 0, procs.log("agent")
    assert zero.wait(120) == 0, procs.log("zero-code")
    loops = {m["trace_id"] for m in map(json.loads, manifest.read_text().splitlines()) if m["loop"]}
    assert len(loops) == 2

    def arrived() -> tuple[Any, Any] | None:
        events = _event_spans(traces_file)
        records = [r for r in _records(logs_file) if r.get("eventName") == EVENT]
        serve_side = [r for r in records if r["resource"].get("service.name") == "serve-agent"]
        zero_side = [r for r in records if r["resource"].get("service.name") == "zero-code-agent"]
        done = events and {t for t, _ in events} == loops and len(serve_side) >= len(events) and len(zero_side) >= 2
        return (events, records) if done else None

    got = wait_until(arrived, 90, 1.0)
    if got is None:
        pytest.fail(f"records did not arrive: {len(_records(logs_file))} records, spans with events"
                    f" {_event_spans(traces_file)}\n" + "\n".join(f"--- {n}\n{procs.log(n)}" for n in procs.procs))
    def settled() -> bool:  # the traces file and the logs file are flushed apart: both complete
        events = _event_spans(traces_file)
        serve_side = [r for r in _records(logs_file) if r.get("eventName") == EVENT
                      and r["resource"].get("service.name") == "serve-agent"]
        return sorted(((r["traceId"], r["spanId"]), r["attrs"]["progress.turn"]) for r in serve_side) == sorted(
            (key, turn) for key, turns in events.items() for turn in turns)

    wait_until(settled, 20, 0.5)
    wait_until(lambda: False, 2.5, 0.5)  # let anything in flight land, so that duplicates would show
    events = _event_spans(traces_file)
    all_records = _records(logs_file)
    records = [r for r in all_records if r.get("eventName") == EVENT]

    # -- the records: one per detection, parented to the span that carries the event ---------
    serve_side = [r for r in records if r["resource"]["service.name"] == "serve-agent"]
    assert sorted(((r["traceId"], r["spanId"]), r["attrs"]["progress.turn"]) for r in serve_side) == sorted(
        (key, turn) for key, turns in events.items() for turn in turns)
    for r in records:
        a = r["attrs"]
        assert r["severityText"] == "WARN" and r["severityNumber"] == 13
        assert a["event.name"] == EVENT and a["gen_ai.evaluation.name"] == "progress.no_progress"
        assert a["gen_ai.evaluation.score.label"] == a["progress.reason"]
        assert a["gen_ai.evaluation.score.value"] == a["progress.level"]
        assert r["body"]["stringValue"] == a["gen_ai.evaluation.explanation"]
        assert len(r["traceId"]) == 32 and len(r["spanId"]) == 16
        assert "status of order" not in json.dumps(r) and "refund" not in json.dumps(r)  # never the arguments
    assert {r["scope"] for r in serve_side} == {"otel-progress.service"}
    zero_side = [r for r in records if r["resource"]["service.name"] == "zero-code-agent"]
    assert sorted(r["attrs"]["progress.turn"] for r in zero_side) == [4, 8]
    assert {r["scope"] for r in zero_side} == {"otel_progress"}
    assert len({r["traceId"] for r in zero_side}) == 1  # one run, one trace
    # only detection records are archived: the plain record was not
    assert all(r.get("eventName") == EVENT for r in all_records), [r.get("eventName") for r in all_records]
    assert "the secret plan" not in logs_file.read_text()

    # -- the count connector's metric (the records' count once the last batch was counted) ------
    def counted() -> str | None:
        text = http_get(f"http://127.0.0.1:{ports['sink_prom']}/metrics")[1]
        done = (prom_value(text, "progress_evaluation_results_total", {"service_name": "serve-agent"})
                >= len(serve_side)
                and prom_value(text, "progress_evaluation_results_total", {"service_name": "zero-code-agent"}) >= 2)
        return text if done else None

    metrics = wait_until(counted, 30, 0.5) or http_get(f"http://127.0.0.1:{ports['sink_prom']}/metrics")[1]
    counted_serve = prom_value(metrics, "progress_evaluation_results_total", {"service_name": "serve-agent"})
    assert counted_serve == len(serve_side), procs.log("sink")
    assert prom_value(metrics, "progress_evaluation_results_total", {"service_name": "zero-code-agent"}) == 2
    # the span events count the tool span and the agent span: about twice the detections
    assert prom_value(metrics, "progress_detection_events_total", {"service_name": "serve-agent"}) > len(serve_side)

    # -- Prometheus fires the shipped alert once per group, with the records' count -----------
    expected: Counter[tuple[str, ...]] = Counter(
        (r["resource"]["service.name"], r["attrs"]["progress.reason"], str(r["attrs"]["progress.level"]))
        for r in records)

    def firing() -> dict[tuple[str, ...], dict[str, Any]] | None:
        body = http_get(f"http://127.0.0.1:{ports['prometheus']}/api/v1/alerts")[1]
        try:
            alerts = json.loads(body)["data"]["alerts"]
        except (ValueError, KeyError):
            return None
        out = {(a["labels"]["service_name"], a["labels"]["progress_reason"], a["labels"]["progress_level"]): a
               for a in alerts if a["labels"].get("alertname") == "OtelProgressNoProgressDetected"
               and a["state"] == "firing"}
        return out if set(out) == set(expected) else None

    alerts = wait_until(firing, 120, 1.0)
    assert alerts, http_get(f"http://127.0.0.1:{ports['prometheus']}/api/v1/alerts")[1][:3000]
    for key, alert in alerts.items():
        assert f"wrote {expected[key]} no_progress event(s)" in alert["annotations"]["description"], (key, alert)

    # -- Loki: the shipped rules' selectors and filters pick exactly these records ------------
    loki = {r["alert"]: r["expr"] for g in yaml.safe_load((ALERTING / "loki-rules.yaml").read_text())["groups"]
            for r in g["rules"]}
    groups = _logql_groups(loki["OtelProgressNoProgressDetected"], all_records)
    assert groups == Counter((r["resource"]["service.name"], "no_progress", r["attrs"]["progress.reason"],
                              str(r["attrs"]["progress.level"]), r["attrs"]["progress.scope"]) for r in records)
    parked = _logql_groups(loki["OtelProgressAgentParked"], all_records)
    assert sum(parked.values()) == sum(r["attrs"]["progress.level"] == 3 for r in records)

    # -- Honeycomb: the trigger's columns are the records' attributes -------------------------
    trigger = json.loads((ALERTING / "honeycomb" / "trigger-evaluation-results.json").read_text())
    query = trigger["query"]
    columns = {k for r in records for k in (*r["attrs"], *r["resource"])}
    assert {f["column"] for f in query["filters"]} | set(query["breakdowns"]) <= columns
    (flt,) = query["filters"]
    assert flt["op"] == "starts-with"
    assert sum(str(r["attrs"].get(flt["column"], "")).startswith(flt["value"]) for r in all_records) == len(records)
    print(f"{len(serve_side)} records from serve, {len(zero_side)} from the processor; alerts firing for"
          f" {sorted(alerts)}; LogQL groups {dict(groups)}")


def test_the_sink_counts_every_record_of_concurrent_exports(otelcol_binary: str, procs: Procs,
                                                            tmp_path: Path) -> None:
    # 40 one-record exports at once, as many agents' serve replicas send them, every record
    # with the same time: each one counts (collector-config/sink.yaml, metrics/detections:
    # the deltas are serialised and stamped on arrival before delta_to_cumulative)
    import threading
    import urllib.request

    ports = {name: free_port() for name in ("grpc", "http", "prom", "health", "tel")}
    procs.start("sink", [otelcol_binary, "--config", str(CONFIG / "sink.yaml")], env={
        "OTEL_PROGRESS_TELEMETRY_HOST": "127.0.0.1",
        "OTEL_PROGRESS_SINK_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{ports['grpc']}",
        "OTEL_PROGRESS_SINK_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{ports['http']}",
        "OTEL_PROGRESS_SINK_PROMETHEUS_ENDPOINT": f"127.0.0.1:{ports['prom']}",
        "OTEL_PROGRESS_SINK_TRACES_FILE": str(tmp_path / "traces.jsonl"),
        "OTEL_PROGRESS_SINK_LOGS_FILE": str(tmp_path / "logs.jsonl"),
        "OTEL_PROGRESS_SINK_HEALTH_ENDPOINT": f"127.0.0.1:{ports['health']}",
        "OTEL_PROGRESS_SINK_TELEMETRY_PORT": str(ports["tel"]),
    })
    assert wait_until(lambda: http_get(f"http://127.0.0.1:{ports['health']}/")[0] == 200, 60, 0.25), procs.log("sink")

    def export(i: int) -> None:
        record = {"timeUnixNano": "1", "eventName": EVENT, "traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}",
                  "attributes": [{"key": "gen_ai.evaluation.name", "value": {"stringValue": "progress.no_progress"}},
                                 {"key": "progress.event", "value": {"stringValue": "no_progress"}}]}
        body = {"resourceLogs": [{"resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "many-agents"}}]},
            "scopeLogs": [{"scope": {"name": "otel-progress.service"}, "logRecords": [record]}]}]}
        request = urllib.request.Request(f"http://127.0.0.1:{ports['http']}/v1/logs", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=10).read()

    threads = [threading.Thread(target=export, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    def counted() -> float:
        text = http_get(f"http://127.0.0.1:{ports['prom']}/metrics")[1]
        return prom_value(text, "progress_evaluation_results_total", {"service_name": "many-agents"})

    wait_until(lambda: counted() >= 40, 20, 0.5)
    assert counted() == 40, http_get(f"http://127.0.0.1:{ports['tel']}/metrics")[1][-3000:]
