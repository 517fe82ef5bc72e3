"""Fault tests of the service (issue 10): the memory budget under a churn of distinct
traces, undeliverable batches, overload admission, a large batch beside small ones, the
health port's limits. Everything runs on 127.0.0.1 with real grpcio servers, each test
bounded in time."""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from otel_progress import Config, ProgressEngine
from otel_progress.service.annotate import MAX_VALUE_CHARS
from otel_progress.service.detector import BatchDetector
from otel_progress.service.metrics import ServiceMetrics
from otel_progress.service.options import ServiceConfig, ServiceConfigError
from otel_progress.service.otlp import key_values
from otel_progress.service.server import ProgressService

from .helpers import (
    Client,
    Downstream,
    Request,
    all_spans,
    attrs_of,
    chat_span,
    detections_on,
    env_without_serve_vars,
    free_port,
    http_get,
    http_span,
    loop_trace,
    progressing_trace,
    prom_value,
    request,
    retry_delay,
    tid,
    tool_span,
    wait_until,
)

pytestmark = pytest.mark.timeout(180)  # every test here is bounded; this is the backstop

REPO = Path(__file__).resolve().parents[2]


def _open_trace(trace: int, calls: int) -> bytes:
    """A trace whose root never arrives: distinct calls, so nothing is detected and nothing closes it."""
    spans = []
    for k in range(1, calls + 1):
        spans.append(chat_span(trace, 100 + k, 1, k))
        spans.append(tool_span(trace, 200 + k, 1, k, args={"q": f"{trace}-{k}"}, result={"items": [k]},
                               agent="researcher"))
    return request(spans).SerializeToString()


def test_memory_budget_holds_under_a_churn_of_distinct_traces() -> None:
    budget = 1536 * 1024
    metrics = ServiceMetrics()
    detector = BatchDetector(ProgressEngine(Config()), metrics, max_traces=100_000, max_spans_per_trace=100_000,
                             max_state_bytes=budget, batch_cache=0)
    batches = [_open_trace(t, 10) for t in range(1, 601)]
    gc.collect()
    tracemalloc.start()
    try:
        deadline = time.monotonic() + 60
        half = 0
        for n, raw in enumerate(batches, 1):
            detector.process(raw)
            assert detector.held_bytes <= budget, (n, detector.held_bytes)
            if n == len(batches) // 2:
                gc.collect()
                half = tracemalloc.get_traced_memory()[0]
            assert time.monotonic() < deadline
        gc.collect()
        end = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    evicted = metrics.value("progress.service.traces.evicted_early", {"reason": "memory_budget"})
    assert evicted > 0
    assert detector.trace_count + evicted == len(batches)
    # The state stopped growing once the budget was reached: the second half of the
    # churn (300 more traces, ~4 MiB of state unbounded) added almost nothing.
    assert end - half < budget * 0.15, (half, end)
    assert metrics.value("progress.service.state.bytes") == detector.held_bytes


def test_held_bytes_estimate_tracks_what_tracemalloc_measures() -> None:
    for calls, traces in ((1, 200), (20, 40), (400, 2)):
        detector = BatchDetector(ProgressEngine(Config()), max_traces=100_000, max_spans_per_trace=100_000,
                                 batch_cache=0)
        batches = [_open_trace(t, calls) for t in range(1, traces + 1)]
        # (a trace first, outside the measure: what the first one costs once per process,
        # imports and caches, is not state the estimate is for)
        detector.process(_open_trace(traces + 1, calls))
        estimated = detector.held_bytes
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for raw in batches:
                detector.process(raw)
            gc.collect()
            real = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        ratio = (detector.held_bytes - estimated) / real
        assert 0.9 <= ratio <= 1.6, (calls, detector.held_bytes, real)


# -- undeliverable batches --------------------------------------------------------------


def _looping_batch(trace: int, tool: str = "search", pad_to: int = 0) -> tuple[list, bytes]:  # type: ignore[type-arg]
    """A run repeating one call (detections on several spans), padded with an HTTP span to
    ``pad_to`` bytes when given."""
    spans = [chat_span(trace, 100 + t, 1, t) for t in range(1, 10)]
    spans += [tool_span(trace, 200 + t, 1, t, tool=tool) for t in range(1, 10)]
    if pad_to:
        size = len(request(spans).SerializeToString())
        pad = http_span(trace, 9, 1, 0.5)
        pad.attributes.extend(key_values({"payload": "p" * (pad_to - size - 200)}))
        spans.append(pad)
    return spans, request(spans).SerializeToString()


def test_annotations_stay_small_whatever_the_tool_names(make_service, downstream, client_for):
    """Tool names of 50 KB: annotations repeat the tool name (event and attributes, on the
    tool span and the agent span), cut to 256 characters, so the batch grows by a few KB."""
    svc = make_service(forward_endpoint=downstream.endpoint)
    _spans, raw = _looping_batch(1, tool="lookup_" + "x" * 50_000)
    client_for(svc).export(raw, timeout=10)
    (out,) = downstream.received
    found = detections_on(Request.FromString(out))
    assert len(found) >= 2
    assert all(len(a["progress.tool"]) <= MAX_VALUE_CHARS for _s, _e, a in found)
    assert len(out) - len(raw) < 1000 * len(found)


def test_a_batch_annotation_pushes_over_the_downstream_limit_is_split_and_delivered(make_service, client_for):
    """The batch is 300 bytes under the downstream's receive limit; its annotations push it
    over, the downstream refuses it as too large (RESOURCE_EXHAUSTED, no RetryInfo), and the
    service sends it again in pieces: every span arrives, annotated, and the request is
    acknowledged instead of being retried forever."""
    limit = 1024 * 1024
    ds = Downstream(max_receive_bytes=limit).start()
    try:
        svc = make_service(forward_endpoint=ds.endpoint)
        spans, raw = _looping_batch(2, pad_to=limit - 300)
        assert limit - 400 < len(raw) < limit
        status, details, _ = client_for(svc).export_call(raw, timeout=10)
        assert status is grpc.StatusCode.OK, details
        got = ds.requests()
        assert len(got) >= 2  # split
        assert sorted(s.span_id for r in got for s in all_spans(r)) == sorted(s.span_id for s in spans)
        assert all(attrs_of(rs.resource.attributes) == {"service.name": "agent-svc"}
                   and rs.scope_spans[0].scope.name == "test.agent" for r in got for rs in r.resource_spans)
        assert any(detections_on(r) for r in got)
        assert svc.metrics.value("progress.service.forward.split") == 1
        assert svc.metrics.value("progress.service.forward.failures") == 0
    finally:
        ds.stop()


def test_a_span_larger_than_the_downstream_accepts_is_a_permanent_failure_not_retried(make_service, client_for):
    ds = Downstream(max_receive_bytes=256 * 1024).start()
    try:
        svc = make_service(forward_endpoint=ds.endpoint)
        big = http_span(2, 5, None, 1.0)
        big.attributes.extend(key_values({"payload": "y" * 400_000}))
        status, details, trailers = client_for(svc).export_call(request([big, tool_span(2, 6, 5, 1)]), timeout=10)
        assert status is grpc.StatusCode.RESOURCE_EXHAUSTED  # no RetryInfo: the Collector drops it
        assert retry_delay(trailers) is None
        assert "permanently" in details
        assert ds.received == []
        assert svc.metrics.value("progress.service.forward.dropped") == 2
        assert svc.metrics.value("progress.service.forward.failures", {"code": "resource_exhausted",
                                                                       "outcome": "permanent"}) == 1
    finally:
        ds.stop()


# -- unreachable downstream --------------------------------------------------------------


def test_unreachable_downstream_is_logged_rate_limited_and_turns_readiness_off_until_it_is_back(
        make_service, client_for, caplog):
    port = free_port()
    svc = make_service(forward_endpoint=f"127.0.0.1:{port}", forward_timeout=0.5)
    client = client_for(svc)
    ready = f"http://127.0.0.1:{svc.health_port}/readyz"
    assert http_get(ready)[0] == 503  # probed at start (tests/service/test_readiness.py)
    with caplog.at_level("WARNING", logger="otel_progress.service"):
        for t in range(6):
            code, _, _ = client.export_call(request(progressing_trace(50 + t, turns=1)), timeout=5)
            assert code is grpc.StatusCode.UNAVAILABLE
    status, body = http_get(ready)
    assert status == 503 and f"127.0.0.1:{port} unreachable" in body
    lines = [r.getMessage() for r in caplog.records]
    assert sum("forward to" in m for m in lines) == 1  # six failures, one line (10 s apart at most)
    assert sum("unreachable" in m for m in lines) == 1
    ds = Downstream().start(port)  # the downstream comes back: the probe notices without traffic
    try:
        assert wait_until(lambda: http_get(ready)[0] == 200, 10)
        assert ds.received  # the probes are empty Export requests
        assert all(Request.FromString(r).resource_spans == [] for r in ds.received)
    finally:
        ds.stop()


# -- overload admission -------------------------------------------------------------------


def test_overload_is_refused_at_once_with_the_default_options(make_service, downstream, client_for):
    """With the defaults (16 requests in flight), 24 requests at once while the downstream
    takes 1.5 s: 16 are handled, 8 are refused at once instead of queueing toward the
    client's deadline."""
    downstream.delay = 1.5
    svc = make_service(forward_endpoint=downstream.endpoint)
    client = client_for(svc)
    out: list[tuple[grpc.StatusCode, float, float | None]] = []
    lock = threading.Lock()

    def send(i: int) -> None:
        t0 = time.monotonic()
        code, _, trailers = client.export_call(request(progressing_trace(900 + i, turns=1)), timeout=8)
        with lock:
            out.append((code, time.monotonic() - t0, retry_delay(trailers)))

    threads = [threading.Thread(target=send, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    ok = [d for c, d, _ in out if c is grpc.StatusCode.OK]
    refused = [(d, r) for c, d, r in out if c is grpc.StatusCode.UNAVAILABLE]
    assert len(ok) == 16 and len(refused) == 8, out
    assert all(d < 1.0 and r == pytest.approx(1.0) for d, r in refused), refused  # before the 1.5 s forward
    assert svc.metrics.value("progress.service.refused") == 8


def test_bytes_in_flight_are_bounded(make_service, downstream, client_for):
    downstream.delay = 1.0
    svc = make_service(forward_endpoint=downstream.endpoint, max_inflight_mib=1)
    client = client_for(svc)
    big = http_span(3, 5, None, 1.0)
    big.attributes.extend(key_values({"payload": "z" * 700_000}))
    codes: list[grpc.StatusCode] = []

    def send(trace: int) -> None:
        s = http_span(trace, 5, None, 1.0)
        s.attributes.extend(key_values({"payload": "z" * 700_000}))
        codes.append(client.export_call(request([s]), timeout=5)[0])

    threads = [threading.Thread(target=send, args=(t,)) for t in (3, 4)]
    for t in threads:
        t.start()
        time.sleep(0.2)
    for t in threads:
        t.join(10)
    assert sorted(c.name for c in codes) == ["OK", "UNAVAILABLE"]
    # alone, a request over the limit is still admitted
    codes.clear()
    send(5)
    assert codes == [grpc.StatusCode.OK]


# -- health port --------------------------------------------------------------------------


def test_traces_listing_is_off_by_default_and_behind_the_token_when_on(make_service, downstream, client_for):
    svc = make_service(forward_endpoint=downstream.endpoint)
    assert http_get(f"http://127.0.0.1:{svc.health_port}/traces")[0] == 404
    svc = make_service(forward_endpoint=downstream.endpoint, health_traces=True, auth_token="s3cret")
    client_for(svc).export(request(progressing_trace(61, turns=1)), metadata=[("authorization", "Bearer s3cret")])
    url = f"http://127.0.0.1:{svc.health_port}/traces"
    assert http_get(url)[0] == 401
    assert _get(url, "Bearer wrong")[0] == 401
    status, body = _get(url + "?limit=5", "Bearer s3cret")
    assert status == 200 and json.loads(body)["active"] == [tid(61).hex()]
    for bad in ("0", "-1", "abc", "", "100001", "1e3"):
        status, body = _get(url + f"?limit={bad}", "Bearer s3cret")
        assert status == 400 and "expected an integer from 1 to 100000" in body, (bad, status, body)


def test_idle_health_connections_do_not_hold_a_thread_each(make_service, downstream):
    svc = make_service(forward_endpoint=downstream.endpoint)
    base = threading.active_count()
    socks = []
    try:
        for _ in range(500):  # connected, request never sent (half-open from the server's view)
            s = socket.create_connection(("127.0.0.1", svc.health_port), timeout=2)
            socks.append(s)
        time.sleep(0.5)
        assert threading.active_count() <= base + 16 + 2
        # the health port recovers once the idle connections time out (5 s)
        assert wait_until(lambda: http_get(f"http://127.0.0.1:{svc.health_port}/healthz")[0] == 200, 12, 0.3)
    finally:
        for s in socks:
            s.close()


def _get(url: str, authorization: str) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": authorization})
    try:
        with urllib.request.urlopen(req, timeout=3) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


# -- a bearer-token source that yields no token (issue 19) -------------------------------


def _serve_process(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``otel-progress serve ARGS`` as a user runs it (no OTEL_PROGRESS_* variables of ours)."""
    env = env_without_serve_vars()
    env.update(env_extra or {})
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, "-m", "otel_progress.cli", "serve", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


@pytest.mark.parametrize("content,why", [
    (b"", "is empty"),
    (b"\n", "blank first line"),
    (b"   \t\r\n", "blank first line"),
    (b"\ns3cret\n", "blank first line"),  # a template that put a newline before the token
    (b"\xff\xfe\x00s3cret\n", "not UTF-8"),
])
def test_a_token_file_that_yields_no_token_is_a_start_up_error(tmp_path, content, why):
    path = tmp_path / "token"
    path.write_bytes(content)
    with pytest.raises(ServiceConfigError, match=why) as info:
        ProgressService(ServiceConfig(listen="127.0.0.1:0", health_listen="", auth_token_file=str(path)))
    assert str(path) in str(info.value) and "auth_token_file" in str(info.value)
    with pytest.raises(ServiceConfigError, match="cannot read"):
        ProgressService(ServiceConfig(listen="127.0.0.1:0", health_listen="", auth_token_file=str(tmp_path)))
    with pytest.raises(ServiceConfigError, match="blank"):
        ProgressService(ServiceConfig(listen="127.0.0.1:0", health_listen="", auth_token=" \t"))


def test_serve_with_an_empty_token_file_exits_2_naming_the_file_and_never_listens(tmp_path):
    path = tmp_path / "token"
    path.write_text("")
    port = free_port()
    for args, env in ((("--auth-token-file", str(path)), {}),
                      ((), {"OTEL_PROGRESS_SERVE_AUTH_TOKEN_FILE": str(path)})):  # as a k8s secret mount
        proc = _serve_process("--listen", f"127.0.0.1:{port}", "--health-listen", "", *args, env_extra=env)
        try:
            _out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _out, err = proc.communicate(timeout=10)
            pytest.fail(f"serve started with an empty token file: {err}")
        assert proc.returncode == 2, err
        assert f"auth_token_file: {path} is empty" in err
        assert "Traceback" not in err and "no authentication" not in err
    # and a token on the first line is read (the error is not a blanket refusal)
    path.write_text("s3cret\n")
    assert ServiceConfig(auth_token_file=str(path)).token() == "s3cret"


# -- tap mode drains its findings on shutdown (issue 19) ---------------------------------


class _SlowTapEndpoint:
    """A real OTLP/gRPC endpoint (traces, logs, metrics) that takes ``delay`` seconds to
    answer each request and counts the annotation spans and log records it accepted."""

    def __init__(self, delay: float) -> None:
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

        self.delay = delay
        self.release = threading.Event()  # set at the end: requests still held return at once
        self.lock = threading.Lock()
        self.spans = 0
        self.records: list[bytes] = []
        self.requests = 0
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), options=[("grpc.so_reuseport", 0)])

        def handler(service: str, count: Callable[[bytes], None]) -> grpc.GenericRpcHandler:
            def export(raw: bytes, context: grpc.ServicerContext) -> bytes:
                self.release.wait(self.delay)
                if context.is_active():
                    with self.lock:
                        self.requests += 1
                        count(raw)
                return b""

            return grpc.method_handlers_generic_handler(service, {"Export": grpc.unary_unary_rpc_method_handler(
                export, request_deserializer=None, response_serializer=lambda b: b)})

        def spans(raw: bytes) -> None:
            self.spans += len(all_spans(Request.FromString(raw)))

        def records(raw: bytes) -> None:
            req = logs_service_pb2.ExportLogsServiceRequest.FromString(raw)
            self.records += [r.SerializeToString() for rl in req.resource_logs for sl in rl.scope_logs
                             for r in sl.log_records]

        self.server.add_generic_rpc_handlers((
            handler("opentelemetry.proto.collector.trace.v1.TraceService", spans),
            handler("opentelemetry.proto.collector.logs.v1.LogsService", records),
            handler("opentelemetry.proto.collector.metrics.v1.MetricsService", lambda raw: None),
        ))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.release.set()
        self.server.stop(0).wait(5)


def _looping_codex_runs(runs: int) -> list[bytes]:
    """``runs`` copies of the real Codex CLI capture of a loop (2 detections each), each
    its own conversation: LogsService/Export requests as the CLI sends them."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    from tests.logs.conftest import b64_ids, golden

    text = golden("codex-0.171.0-loop.jsonl").read_text()
    conversation = "01a23128-9b8f-7d63-91ab-f96e27715538"
    assert conversation in text
    out = []
    for n in range(runs):
        for line in text.replace(conversation, f"01a23128-9b8f-7d63-91ab-{n:012d}").splitlines():
            if line.strip():
                message = json_format.ParseDict(b64_ids(json.loads(line)), ExportLogsServiceRequest(),
                                                ignore_unknown_fields=True)
                out.append(message.SerializeToString())
    return out


_LOGS_EXPORT = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"


def _tap_load(port: int, codex_runs: int, traces: int) -> None:
    """Send the load to a service: looping Codex sessions (logs) and looping traces."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        logs = channel.unary_unary(_LOGS_EXPORT, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        for raw in _looping_codex_runs(codex_runs):
            logs(raw, timeout=10)
    client = Client(f"127.0.0.1:{port}")
    try:
        for t in range(traces):
            client.export(request(loop_trace(700 + t, turns=6)))
    finally:
        client.close()


def test_tap_mode_delivers_every_finding_to_a_slow_endpoint_on_sigterm_right_after_load():
    """Issue 19: with a slow tap endpoint, SIGTERM right after load delivered 39 of 120
    detection records (one request at a time, then 5 s of flush and the rest discarded)."""
    sink = _SlowTapEndpoint(delay=0.25)
    port, health = free_port(), free_port()
    proc = _serve_process("--mode", "tap", "--tap-endpoint", sink.endpoint, "--listen", f"127.0.0.1:{port}",
                          "--health-listen", f"127.0.0.1:{health}", "--drain-timeout", "10")
    try:
        assert wait_until(lambda: proc.poll() is not None or http_get(f"http://127.0.0.1:{health}/readyz")[0] == 200,
                          30, 0.2)
        assert proc.poll() is None, proc.communicate()[1]
        _tap_load(port, codex_runs=40, traces=40)
        metrics = http_get(f"http://127.0.0.1:{health}/metrics")[1]
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        _out, err = proc.communicate(timeout=30)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
        sink.stop()
    assert proc.returncode == 0, err
    detections = prom_value(metrics, "progress_service_detections_total")
    from opentelemetry.proto.logs.v1 import logs_pb2

    evaluations = sum(logs_pb2.LogRecord.FromString(r).event_name == "gen_ai.evaluation.result" for r in sink.records)
    assert len(sink.records) - evaluations == 80  # 2 per looping Codex session, every one delivered
    assert len(set(sink.records)) == len(sink.records)
    assert sink.spans == detections - 80 > 0  # and every annotation span of the traces
    # and every detection as a gen_ai.evaluation.result record (--detection-events both): the
    # traces' and the Codex sessions'
    assert evaluations == sink.spans + 80
    assert "shutdown: dropped" not in err and "WARNING" not in err, err
    assert took < 12, took  # within --drain-timeout (and the last metrics push)
    assert sink.requests < 60  # batched: far fewer requests than the 80 records and the spans


def test_tap_mode_counts_and_logs_what_it_cannot_send_within_the_drain_timeout(make_service, caplog):
    sink = _SlowTapEndpoint(delay=60)  # accepts, never answers in time
    try:
        svc = make_service(mode="tap", tap_endpoint=sink.endpoint, forward_timeout=0.5, drain_timeout=1.0)
        _tap_load(svc.port, codex_runs=4, traces=4)
        found = svc.metrics.value("progress.service.detections")
        assert found > 8
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="otel_progress"):
            svc.stop()
        took = time.monotonic() - started
    finally:
        sink.stop()
    assert took < 1.0 + 1.0 + 2 * 2.0 + 1.0, took  # the drain, a last export, the last metrics push
    value = svc.metrics.value
    records = value("progress.service.tap.dropped", {"signal": "logs", "reason": "shutdown"})
    spans = value("progress.service.tap.dropped", {"signal": "traces", "reason": "shutdown"})
    # the Codex sessions' 8 detection records (2 each); the traces' detections as annotation
    # spans; with --detection-events both, every detection as a gen_ai.evaluation.result record
    assert records == 8 + found and spans == found - 8
    assert value("progress.service.tap.exported") == 0 and value("progress.service.tap.failures") > 0
    assert value("progress.service.tap.dropped") == records + spans  # nothing dropped without a count
    lines = [r.getMessage() for r in caplog.records if "shutdown: dropped" in r.getMessage()]
    assert any(f"dropped {records:.0f} detection record(s)" in m and sink.endpoint in m for m in lines), lines
    assert any(f"dropped {spans:.0f} annotation span(s)" in m for m in lines), lines
    text = svc.metrics.prometheus_text()
    assert f'progress_service_tap_dropped_total{{reason="shutdown",signal="logs"}} {records:.0f}' in text


# -- the health port: liveness whatever else is connected (issue 19) --------------------


def test_idle_connections_to_the_health_port_cannot_fail_liveness(make_service, downstream):
    """Issue 19: 300 idle unauthenticated connections made /healthz answer 503 (16 served
    at once), so anyone who could reach the port could get the pod restarted."""
    svc = make_service(forward_endpoint=downstream.endpoint)
    base = threading.active_count()
    socks = []
    try:
        for n in range(600):  # connected and silent, or a request head that never ends (slowloris)
            s = socket.create_connection(("127.0.0.1", svc.health_port), timeout=2)
            if n % 2:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        started = time.monotonic()
        for _ in range(20):  # every probe is answered at once, while the connections are held
            assert http_get(f"http://127.0.0.1:{svc.health_port}/healthz", timeout=2) == (200, "ok\n")
        assert http_get(f"http://127.0.0.1:{svc.health_port}/readyz", timeout=2) == (200, "ready\n")
        assert time.monotonic() - started < 4  # not after the idle connections timed out (5 s)
        assert threading.active_count() <= base + 1  # no thread per connection
        assert svc._health is not None and svc._health.open_connections <= 256
        shed = svc.metrics.value("progress.service.health.refused", {"reason": "shed"})
        assert shed >= 600 - 256
        assert 'progress_service_health_refused_total{reason="shed"}' in http_get(
            f"http://127.0.0.1:{svc.health_port}/metrics")[1]
    finally:
        for s in socks:
            s.close()


def test_the_health_port_answers_http_as_before(make_service, downstream):
    svc = make_service(forward_endpoint=downstream.endpoint, health_max_connections=4)
    base = f"http://127.0.0.1:{svc.health_port}"
    assert http_get(base + "/nowhere")[0] == 404
    with socket.create_connection(("127.0.0.1", svc.health_port), timeout=3) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"p" * 20_000 + b"\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 431 ")  # a head over 16 KiB
    with socket.create_connection(("127.0.0.1", svc.health_port), timeout=3) as s:
        s.sendall(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 405 ")
    with socket.create_connection(("127.0.0.1", svc.health_port), timeout=3) as s:
        s.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = s.recv(1000)
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\n")  # no body
    with socket.create_connection(("127.0.0.1", svc.health_port), timeout=8) as s:
        started = time.monotonic()
        assert s.recv(100) == b""  # a connection that sends nothing is closed after 5 s
        assert 4 < time.monotonic() - started < 7.5


def test_a_full_tap_queue_drops_what_does_not_fit_and_counts_it(caplog):
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    from otel_progress.service.logs import LogsForwarder
    from otel_progress.service.tap import LogsTap

    sink = _SlowTapEndpoint(delay=60)
    metrics = ServiceMetrics()
    forwarder = LogsForwarder(sink.endpoint, timeout=0.5)
    tap = LogsTap(forwarder, metrics, max_queue=3)
    try:
        request = ExportLogsServiceRequest()
        records = request.resource_logs.add().scope_logs.add().log_records
        for n in range(10):
            records.add().body.string_value = f"detection {n}"
        with caplog.at_level(logging.WARNING, logger="otel_progress"):
            assert tap.submit(request) == 3
            assert tap.shutdown(timeout=0.2) == 3
    finally:
        forwarder.close()
        sink.stop()
    assert metrics.value("progress.service.tap.dropped", {"signal": "logs", "reason": "queue_full"}) == 7
    assert metrics.value("progress.service.tap.dropped", {"signal": "logs", "reason": "shutdown"}) == 3
    assert any("tap queue full (3 detection record(s)): dropped 7" in r.getMessage() for r in caplog.records)

# -- deep attribute values (issue 19, item 1) --------------------------------------------
# Python's protobuf runtime (upb) refuses a message nested past 100 levels: an attribute
# or a log body whose kvlistValue is nested about 32 deep puts a span or a log record past
# it (the Go Collector accepts such data). The service must read the rest of the request,
# analyse it, forward the offending span or record exactly as it came, and count it.

DEPTHS = (0, 1, 31, 32, 33, 100, 20_000)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _deep_value(depth: int) -> bytes:
    """A serialized AnyValue: ``depth`` kvlistValues, each holding one key ``k``, around a
    string. Built from the inside out (every level's payload ends with the next level, so
    the bytes are the levels' prefixes, outermost first, then the string): linear time."""
    leaf = b"\x0a\x04leaf"  # AnyValue.string_value
    prefixes = []
    inner = len(leaf)
    for _ in range(depth):
        kv = 3 + 1 + len(_varint(inner)) + inner  # KeyValue: key "k", value (the inner AnyValue)
        kvlist = 1 + len(_varint(kv)) + kv  # KeyValueList.values
        prefixes.append(b"\x32" + _varint(kvlist) + b"\x0a" + _varint(kv) + b"\x0a\x01k\x12" + _varint(inner))
        inner = 1 + len(_varint(kvlist)) + kvlist
    return b"".join(reversed(prefixes)) + leaf


def _with_deep_attribute(span_bytes: bytes, depth: int) -> bytes:
    """The span with one more attribute, ``deep.value``, nested ``depth`` levels (field 9,
    appended: protobuf fields may come in any order)."""
    value = _deep_value(depth)
    kv = b"\x0a\x0adeep.value\x12" + _varint(len(value)) + value
    return span_bytes + b"\x4a" + _varint(len(kv)) + kv


def _decodes(parse, raw: bytes) -> bool:  # type: ignore[no-untyped-def]
    try:
        parse(raw)
    except Exception:
        return False
    return True


def _deep_trace_batch(depth: int) -> tuple[bytes, bytes]:
    """A request with a looping run (trace 1: detections) and, in trace 2, a tool span
    with a deep attribute; returns (request bytes, the deep span's bytes)."""
    from otel_progress.service.otlp import SlimRequest

    spans, _raw = _looping_batch(1)
    deep = _with_deep_attribute(tool_span(2, 300, 1, 1).SerializeToString(), depth)
    slim = SlimRequest.FromString(request(spans).SerializeToString())
    slim.resource_spans[0].scope_spans[0].spans.insert(3, deep)
    return slim.SerializeToString(), deep


def _expected_unreadable(parse, raw: bytes, depth: int) -> int:  # type: ignore[no-untyped-def]
    """1 when the protobuf runtime cannot decode the span or record alone, else 0 (where its
    limit falls is the runtime's business: about 32 levels today; 0 and 100+ are certain)."""
    unreadable = 0 if _decodes(parse, raw) else 1
    assert unreadable == (0 if depth == 0 else 1 if depth >= 100 else unreadable)
    return unreadable


def _spans_of(raw: bytes) -> list[bytes]:
    from otel_progress.service.otlp import SlimRequest

    slim = SlimRequest.FromString(raw)
    return [b for rs in slim.resource_spans for ss in rs.scope_spans for b in ss.spans]


def _events_of(span_bytes_list: list[bytes]) -> list[str]:
    from opentelemetry.proto.trace.v1 import trace_pb2

    out = []
    for b in span_bytes_list:
        if not _decodes(trace_pb2.Span.FromString, b):
            continue
        out.extend(ev.name for ev in trace_pb2.Span.FromString(b).events)
    return out


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_span_inline_is_forwarded_as_it_came_and_the_rest_is_annotated(depth, make_service, downstream,
                                                                           client_for, caplog):
    from opentelemetry.proto.trace.v1 import trace_pb2

    svc = make_service(forward_endpoint=downstream.endpoint)
    raw, deep = _deep_trace_batch(depth)
    client_for(svc).export(raw, timeout=30)
    (out,) = downstream.received
    spans = _spans_of(out)
    assert deep in spans  # the offending span, byte for byte
    assert len(spans) == len(_spans_of(raw))
    assert "no_progress" in _events_of(spans)  # the looping run of the same batch is annotated
    unreadable = _expected_unreadable(trace_pb2.Span.FromString, deep, depth)
    assert svc.metrics.value("progress.service.spans.unreadable") == unreadable
    assert svc.metrics.value("progress.service.errors") == 0
    assert "annotating failed" not in caplog.text and "Traceback" not in caplog.text


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_span_tap_mode_still_reports_the_rest(depth, make_service, downstream, client_for):
    from opentelemetry.proto.trace.v1 import trace_pb2

    svc = make_service(mode="tap", tap_endpoint=downstream.endpoint)
    raw, deep = _deep_trace_batch(depth)
    client_for(svc).export(raw, timeout=30)
    assert wait_until(lambda: any("no_progress" in [s.name for s in all_spans(r)] for r in downstream.requests()))
    found = [(rs.resource, s) for r in downstream.requests() for rs in r.resource_spans for ss in rs.scope_spans
             for s in ss.spans if s.name == "no_progress"]
    looped = {s.span_id: s for s in _looping_batch(1)[0]}
    for resource, annotation in found:  # in the resource of the run, at the end of the offending span
        assert attrs_of(resource.attributes)["service.name"] == "agent-svc"
        offending = looped[bytes.fromhex(attrs_of(annotation.attributes)["progress.annotates.span_id"])]
        assert annotation.start_time_unix_nano == offending.end_time_unix_nano
    unreadable = _expected_unreadable(trace_pb2.Span.FromString, deep, depth)
    assert svc.metrics.value("progress.service.spans.unreadable") == unreadable
    assert svc.metrics.value("progress.service.errors") == 0


class _RawLogsSink:
    """A real OTLP/gRPC LogsService that keeps the bytes it receives."""

    def __init__(self) -> None:
        from concurrent import futures

        self.received: list[bytes] = []
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.so_reuseport", 0)])
        handler = grpc.method_handlers_generic_handler("opentelemetry.proto.collector.logs.v1.LogsService", {
            "Export": grpc.unary_unary_rpc_method_handler(self._export, request_deserializer=None,
                                                          response_serializer=None)})
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _export(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        with self.lock:
            self.received.append(bytes(raw))
        return b""

    def records(self) -> list[bytes]:
        from otel_progress.service.otlp import SlimLogsRequest

        with self.lock:
            return [r for raw in self.received for rl in SlimLogsRequest.FromString(raw).resource_logs
                    for sl in rl.scope_logs for r in sl.log_records]


@pytest.fixture
def logs_sink():  # type: ignore[no-untyped-def]
    sink = _RawLogsSink()
    yield sink
    sink.server.stop(0)


def _deep_log_requests(depth: int) -> tuple[list[bytes], bytes]:
    """The Codex loop capture (3 detections) with one more record in its first request: a
    ``codex.tool_result`` (a name a reader knows, so it is decoded) whose body is nested
    ``depth`` levels; returns (request bytes, the deep record's bytes)."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    from otel_progress.service.otlp import SlimLogsRequest
    from tests.logs.conftest import b64_ids, documents, golden

    requests = [json_format.ParseDict(b64_ids(d), ExportLogsServiceRequest(), ignore_unknown_fields=True)
                .SerializeToString() for d in documents(golden("codex-0.171.0-loop.jsonl"))]
    body = _deep_value(depth)
    record = (b"\x59" + (1_796_121_074_579_761_284).to_bytes(8, "little")  # observed_time_unix_nano (fixed64)
              + b"\x2a" + _varint(len(body)) + body  # body
              + b"\x62\x11codex.tool_result")  # event_name
    slim = SlimLogsRequest.FromString(requests[0])
    slim.resource_logs[0].scope_logs[0].log_records.append(record)
    requests[0] = slim.SerializeToString()
    return requests, record


def _send_logs(port: int, requests: list[bytes]) -> list[grpc.StatusCode]:
    codes = []
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        export = ch.unary_unary("/opentelemetry.proto.collector.logs.v1.LogsService/Export",
                                request_serializer=None, response_deserializer=None)
        for raw in requests:
            try:
                export(raw, timeout=30)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as exc:
                codes.append(exc.code())
    return codes


def _progress_events(records: list[bytes]) -> list[str]:
    from opentelemetry.proto.logs.v1 import logs_pb2

    return [r.event_name for r in (logs_pb2.LogRecord.FromString(b) for b in records
                                   if _decodes(logs_pb2.LogRecord.FromString, b))
            if r.event_name.startswith("progress.")]


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_log_record_inline_is_forwarded_as_it_came_and_the_rest_is_annotated(depth, make_service,
                                                                                 logs_sink, caplog):
    from opentelemetry.proto.logs.v1 import logs_pb2

    svc = make_service(forward_endpoint=f"127.0.0.1:{logs_sink.port}", health_listen="")
    requests, deep = _deep_log_requests(depth)
    assert _send_logs(svc.port, requests) == [grpc.StatusCode.OK] * len(requests)
    records = logs_sink.records()
    assert deep in records  # byte for byte
    assert _progress_events(records) == ["progress.no_progress"] * 2  # as without the deep record
    unreadable = _expected_unreadable(logs_pb2.LogRecord.FromString, deep, depth)
    assert svc.metrics.value("progress.service.log_records.unreadable") == unreadable
    assert svc.metrics.value("progress.service.errors") == 0
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_log_record_tap_mode_still_reports_the_rest(depth, make_service, logs_sink):
    from opentelemetry.proto.logs.v1 import logs_pb2

    svc = make_service(mode="tap", tap_endpoint=f"127.0.0.1:{logs_sink.port}", health_listen="")
    requests, deep = _deep_log_requests(depth)
    assert _send_logs(svc.port, requests) == [grpc.StatusCode.OK] * len(requests)
    assert wait_until(lambda: len(_progress_events(logs_sink.records())) == 2)
    assert deep not in logs_sink.records()  # tap mode forwards only the findings
    unreadable = _expected_unreadable(logs_pb2.LogRecord.FromString, deep, depth)
    assert svc.metrics.value("progress.service.log_records.unreadable") == unreadable


def test_a_batch_with_a_deep_span_is_split_without_decoding_it(make_service, client_for):
    """Over the downstream's limit once annotated, a batch holding a span nested 20,000
    deep is split into pieces as it is split without it (the pieces are cut from the
    request's bytes): every span arrives, the deep one byte for byte."""
    limit = 1024 * 1024
    ds = Downstream(max_receive_bytes=limit).start()
    try:
        svc = make_service(forward_endpoint=ds.endpoint)
        from otel_progress.service.otlp import SlimRequest

        _raw, deep = _deep_trace_batch(20_000)
        spans, padded = _looping_batch(2, pad_to=limit - 300 - len(deep) - 4)

        slim = SlimRequest.FromString(padded)
        slim.resource_spans[0].scope_spans[0].spans.append(deep)
        raw = slim.SerializeToString()
        assert limit - 400 < len(raw) < limit
        status, details, _ = client_for(svc).export_call(raw, timeout=30)
        assert status is grpc.StatusCode.OK, details
        assert len(ds.received) >= 2  # split
        got = [b for piece in ds.received for b in _spans_of(piece)]
        assert deep in got and len(got) == len(spans) + 1
        assert svc.metrics.value("progress.service.forward.split") == 1
        assert svc.metrics.value("progress.service.spans.unreadable") == 1
    finally:
        ds.stop()
