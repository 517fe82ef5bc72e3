"""Run the built Collector with the real configs on loopback and push OTLP through it.

* sink.yaml: one annotated span in -> file exporter output + detection metrics on /metrics
* gateway.yaml: traces sharded by trace ID over two fake `otel-progress serve` replicas
* sink.yaml + sink-backends.yaml + sink-tail-sampling.yaml: fake Tempo (gRPC) and
  fake Honeycomb (HTTP) receive only the trace that carries a detection
"""

from __future__ import annotations

import gzip
import http.server
import json
import os
import re
import threading
from pathlib import Path

import pytest

from .conftest import CONFIG_DIR

START_TIMEOUT_S = 30
DATA_TIMEOUT_S = 20


@pytest.fixture
def otlp(otlp_deps):
    from . import otlp_util

    return otlp_util


def _sink_env(otlp, tmp_path: Path) -> dict[str, str]:
    p = {k: otlp.free_port() for k in ("grpc", "http", "prom", "health", "tel")}
    return {
        "OTEL_PROGRESS_SINK_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{p['grpc']}",
        "OTEL_PROGRESS_SINK_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{p['http']}",
        "OTEL_PROGRESS_SINK_PROMETHEUS_ENDPOINT": f"127.0.0.1:{p['prom']}",
        "OTEL_PROGRESS_SINK_HEALTH_ENDPOINT": f"127.0.0.1:{p['health']}",
        "OTEL_PROGRESS_SINK_TELEMETRY_PORT": str(p["tel"]),
        "OTEL_PROGRESS_SINK_TRACES_FILE": str(tmp_path / "out" / "traces.jsonl"),
        "OTEL_PROGRESS_SINK_LOGS_FILE": str(tmp_path / "out" / "logs.jsonl"),
    }


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def _metric_value(text: str, name: str, **labels: str) -> float | None:
    """Sum of the samples of `name` whose labels include `labels` (None if no sample)."""
    total = None
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        m = re.match(r"^([^{\s]+)(\{.*\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total = (total or 0.0) + float(m.group(3))
    return total


def _fail_with_log(collector, msg: str) -> None:
    pytest.fail(f"{msg}\n--- collector log (tail) ---\n{collector.log()[-4000:]}", pytrace=False)


def test_sink_turns_a_detection_into_file_output_and_metrics(otelcol_binary: str, otlp, tmp_path: Path) -> None:
    env = _sink_env(otlp, tmp_path)
    grpc_ep = env["OTEL_PROGRESS_SINK_OTLP_GRPC_ENDPOINT"]
    prom_url = f"http://{env['OTEL_PROGRESS_SINK_PROMETHEUS_ENDPOINT']}/metrics"
    traces_file = Path(env["OTEL_PROGRESS_SINK_TRACES_FILE"])
    trace_id, span_id = os.urandom(16), os.urandom(8)

    with otlp.Collector(otelcol_binary, [CONFIG_DIR / "sink.yaml"], env, tmp_path / "sink.log") as sink:
        try:
            otlp.wait_port(_port(grpc_ep), START_TIMEOUT_S, sink.proc)
            otlp.wait_port(_port(env["OTEL_PROGRESS_SINK_PROMETHEUS_ENDPOINT"]), START_TIMEOUT_S, sink.proc)
        except (TimeoutError, RuntimeError) as exc:
            _fail_with_log(sink, str(exc))

        health = otlp.http_get(f"http://{env['OTEL_PROGRESS_SINK_HEALTH_ENDPOINT']}/")
        assert "Server available" in health or "ready" in health.lower(), health

        request = otlp.make_request(
            [
                otlp.detection_span(trace_id, span_id, agent="planner"),
                otlp.make_span(trace_id, os.urandom(8), attributes={"gen_ai.agent.name": "planner"}),
            ],
            service_name="agent-under-test",
        )
        otlp.export(grpc_ep, request)

        def metrics_ready():
            text = otlp.http_get(prom_url)
            ok = (
                _metric_value(text, "progress_detection_events_total") is not None
                and _metric_value(text, "progress_detected_spans_total") is not None
            )
            return text if ok else None

        text = otlp.wait_until(metrics_ready, DATA_TIMEOUT_S)
        if not text:
            _fail_with_log(sink, f"detection metrics did not appear on {prom_url}:\n{otlp.http_get(prom_url)}")

        assert (
            _metric_value(
                text,
                "progress_detection_events_total",
                progress_event="no_progress",
                progress_reason="repeat_cycle",
                progress_level="3",
                progress_scope="agent",
                service_name="agent-under-test",
            )
            == 1
        ), text
        assert (
            _metric_value(
                text,
                "progress_detected_spans_total",
                progress_reason="repeat_cycle",
                progress_level="3",
                gen_ai_agent_name="planner",
                service_name="agent-under-test",
            )
            == 1
        ), text
        # Both spans count toward the denominator; only one was a detection.
        assert _metric_value(text, "progress_spans_seen_total", service_name="agent-under-test") == 2, text
        assert "# TYPE progress_detection_events_total counter" in text

        # A second detection accumulates (delta_to_cumulative before prometheus).
        otlp.export(grpc_ep, otlp.make_request([otlp.detection_span(trace_id, os.urandom(8))], "agent-under-test"))
        grown = otlp.wait_until(
            lambda: (_metric_value(otlp.http_get(prom_url), "progress_detection_events_total") or 0) >= 2,
            DATA_TIMEOUT_S,
        )
        assert grown, otlp.http_get(prom_url)

        def file_has_trace():
            if not traces_file.exists():
                return None
            lines = [ln for ln in traces_file.read_text().splitlines() if ln.strip()]
            return lines if any(trace_id.hex() in ln for ln in lines) else None

        lines = otlp.wait_until(file_has_trace, DATA_TIMEOUT_S)
        if not lines:
            _fail_with_log(sink, f"trace {trace_id.hex()} not written to {traces_file}")

    spans = [
        span
        for ln in lines
        for rs in json.loads(ln)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
        if span["traceId"] == trace_id.hex()
    ]
    detected = [s for s in spans if s["spanId"] == span_id.hex()]
    assert len(detected) == 1, spans
    attrs = {a["key"]: a["value"] for a in detected[0]["attributes"]}
    assert attrs["progress.detected"] == {"boolValue": True}
    assert attrs["progress.reason"] == {"stringValue": "repeat_cycle"}
    assert attrs["progress.level"] == {"intValue": "3"}
    (event,) = detected[0]["events"]
    assert event["name"] == "no_progress"
    ev_attrs = {a["key"] for a in event["attributes"]}
    assert {"progress.reason", "progress.turn", "progress.level", "progress.scope"} <= ev_attrs
    # The archive gets the spans unmodified: the detections pipeline's transform
    # (progress.event) runs on its own copy.
    assert "progress.event" not in ev_attrs
    assert sink.proc.returncode == 0, sink.log()[-2000:]


def test_gateway_shards_traces_by_trace_id(otelcol_binary: str, otlp, tmp_path: Path) -> None:
    n_traces, spans_per_trace, batches = 24, 4, 2
    with otlp.FakeTraceBackend() as r0, otlp.FakeTraceBackend() as r1:
        p = {k: otlp.free_port() for k in ("grpc", "http", "health", "tel", "sink")}
        env = {
            "OTEL_PROGRESS_GATEWAY_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{p['grpc']}",
            "OTEL_PROGRESS_GATEWAY_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{p['http']}",
            "OTEL_PROGRESS_GATEWAY_HEALTH_ENDPOINT": f"127.0.0.1:{p['health']}",
            "OTEL_PROGRESS_GATEWAY_TELEMETRY_PORT": str(p["tel"]),
            "OTEL_PROGRESS_SINK_ENDPOINT": f"127.0.0.1:{p['sink']}",
            "OTEL_PROGRESS_REPLICAS": f"[{r0.endpoint}, {r1.endpoint}]",
        }
        gw_log = tmp_path / "gateway.log"
        with otlp.Collector(otelcol_binary, [CONFIG_DIR / "gateway.yaml"], env, gw_log) as gw:
            try:
                otlp.wait_port(p["grpc"], START_TIMEOUT_S, gw.proc)
            except (TimeoutError, RuntimeError) as exc:
                _fail_with_log(gw, str(exc))
            trace_ids = [os.urandom(16) for _ in range(n_traces)]
            # Spans of every trace spread over several Export calls, interleaved.
            for b in range(batches):
                spans = [
                    otlp.make_span(tid, os.urandom(8), name=f"tool-{b}-{i}")
                    for tid in trace_ids
                    for i in range(spans_per_trace // batches)
                ]
                otlp.export(f"127.0.0.1:{p['grpc']}", otlp.make_request(spans))

            total = n_traces * spans_per_trace
            done = otlp.wait_until(lambda: len(r0.spans()) + len(r1.spans()) >= total, DATA_TIMEOUT_S)
            if not done:
                _fail_with_log(gw, f"replicas got {len(r0.spans())}+{len(r1.spans())} of {total} spans")
            selfmetrics = otlp.http_get(f"http://127.0.0.1:{p['tel']}/metrics")

    ids0, ids1 = r0.trace_ids(), r1.trace_ids()
    assert ids0 | ids1 == set(trace_ids)
    assert not ids0 & ids1, "a trace was split across replicas"
    assert ids0 and ids1, "all traces went to one replica"
    for backend in (r0, r1):
        per_trace: dict[bytes, int] = {}
        for span in backend.spans():
            per_trace[span.trace_id] = per_trace.get(span.trace_id, 0) + 1
        assert set(per_trace.values()) == {spans_per_trace}
    # The replicas are told who is calling (grpcio hides grpc-encoding, so gzip
    # is checked in the config test instead).
    assert all("OpenTelemetry Collector" in md.get("user-agent", "") for md in r0.recorder.metadata)
    assert _metric_value(selfmetrics, "otelcol_loadbalancer_num_backends") == 2, selfmetrics


class _HoneycombStub(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, dict[str, str], bytes]]

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.server.received.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):  # keep pytest output clean
        pass


def test_backends_with_tail_sampling_keep_only_detected_traces(otelcol_binary: str, otlp, tmp_path: Path) -> None:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    hc = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HoneycombStub)
    hc.received = []
    hc_thread = threading.Thread(target=hc.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    hc_thread.start()
    try:
        with otlp.FakeTraceBackend() as tempo:
            env = _sink_env(otlp, tmp_path)
            env.update(
                {
                    "OTEL_PROGRESS_TEMPO_ENDPOINT": tempo.endpoint,
                    "OTEL_PROGRESS_HONEYCOMB_ENDPOINT": f"http://127.0.0.1:{hc.server_address[1]}",
                    "HONEYCOMB_API_KEY": "test-key-123",
                    "OTEL_PROGRESS_SAMPLING_DECISION_WAIT": "1s",
                    "OTEL_PROGRESS_SAMPLING_PERCENT": "0",
                }
            )
            configs = [CONFIG_DIR / n for n in ("sink.yaml", "sink-backends.yaml", "sink-tail-sampling.yaml")]
            with otlp.Collector(otelcol_binary, configs, env, tmp_path / "sink-backends.log") as sink:
                grpc_ep = env["OTEL_PROGRESS_SINK_OTLP_GRPC_ENDPOINT"]
                try:
                    otlp.wait_port(_port(grpc_ep), START_TIMEOUT_S, sink.proc)
                except (TimeoutError, RuntimeError) as exc:
                    _fail_with_log(sink, str(exc))
                looping, plain = os.urandom(16), os.urandom(16)
                root = os.urandom(8)
                otlp.export(
                    grpc_ep,
                    otlp.make_request(
                        [
                            otlp.make_span(looping, root, name="invoke_agent planner"),
                            otlp.detection_span(looping, os.urandom(8)),
                            otlp.make_span(plain, os.urandom(8), name="invoke_agent writer"),
                            otlp.make_span(plain, os.urandom(8)),
                        ]
                    ),
                )
                got = otlp.wait_until(lambda: tempo.trace_ids() and hc.received, DATA_TIMEOUT_S)
                if not got:
                    _fail_with_log(sink, f"backends got tempo={tempo.trace_ids()} honeycomb={len(hc.received)}")
                # Give the non-detected trace its decision too (decision_wait 1s + tick).
                otlp.wait_until(lambda: False, 3)
                traces_file = Path(env["OTEL_PROGRESS_SINK_TRACES_FILE"])
                archived = otlp.wait_until(
                    lambda: traces_file.exists() and plain.hex() in traces_file.read_text(), DATA_TIMEOUT_S
                )

        assert tempo.trace_ids() == {looping}
        assert len(tempo.spans()) == 2  # the whole looping trace, not just the flagged span
        hc_trace_ids = set()
        for path, headers, body in hc.received:
            assert path == "/v1/traces"
            assert headers.get("x-honeycomb-team") == "test-key-123"
            req = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            hc_trace_ids |= {s.trace_id for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans}
        assert hc_trace_ids == {looping}
        # The archive is not sampled.
        assert archived, "the unsampled archive lost the trace without a detection"
    finally:
        hc.shutdown()
        hc.server_close()
        hc_thread.join(timeout=5)
