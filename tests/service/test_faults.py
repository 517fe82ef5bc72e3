"""Fault tests of the service (issue 10): the memory budget under a churn of distinct
traces, undeliverable batches, overload admission, a large batch beside small ones, the
health port's limits. Everything runs on 127.0.0.1 with real grpcio servers, each test
bounded in time."""

from __future__ import annotations

import gc
import json
import os
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import urllib.error
import urllib.request
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
    progressing_trace,
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
        ratio = detector.held_bytes / real
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
    assert http_get(ready)[0] == 200
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
