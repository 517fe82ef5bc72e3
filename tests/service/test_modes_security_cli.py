"""Tap mode, TLS / mutual TLS / bearer tokens, options and the `serve` command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from otel_progress.service.options import ServiceConfig, ServiceConfigError, from_args
from otel_progress.service.otlp import any_value

from .helpers import (
    Client,
    Downstream,
    all_spans,
    attrs_of,
    env_without_serve_vars,
    free_port,
    http_get,
    loop_trace,
    progressing_trace,
    prom_value,
    request,
    wait_until,
)

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]


# -- tap mode ---------------------------------------------------------------------------


def test_tap_mode_sends_an_annotation_span_and_metrics_and_forwards_nothing(make_service, downstream, client_for):
    svc = make_service(mode="tap", tap_endpoint=downstream.endpoint, metrics_interval=0.3)
    client = client_for(svc)
    loop = loop_trace(21, turns=2)
    client.export(request(loop, service="shop-agent"))
    client.export(request(loop, service="shop-agent"))  # a duplicate delivery: no second finding
    assert wait_until(lambda: downstream.received, 5)
    time.sleep(0.8)
    reqs = downstream.requests()
    assert len(reqs) == 1, "only the finding is sent, never the batch itself"
    (ann,) = all_spans(reqs[0])
    offending = next(s for s in loop if s.span_id.hex() == "00000000000000ca")
    assert ann.trace_id == offending.trace_id
    assert ann.parent_span_id == offending.parent_span_id
    assert [(lk.trace_id, lk.span_id) for lk in ann.links] == [(offending.trace_id, offending.span_id)]
    assert ann.name == "no_progress"
    attrs = attrs_of(ann.attributes)
    assert attrs["progress.detected"] is True and attrs["progress.reason"] == "repeat_cycle"
    assert attrs["progress.annotates.span_id"] == "00000000000000ca"
    assert "progress.nudge" in attrs
    assert [e.name for e in ann.events] == ["no_progress"]
    resource = attrs_of(reqs[0].resource_spans[0].resource.attributes)
    assert resource["service.name"] == "shop-agent"  # the agent's resource, for per-service alerts
    # metrics over OTLP
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

    assert wait_until(lambda: downstream.metrics_received, 5)
    m = metrics_service_pb2.ExportMetricsServiceRequest.FromString(downstream.metrics_received[-1])
    names = {metric.name: metric for rm in m.resource_metrics for sm in rm.scope_metrics for metric in sm.metrics}
    det = names["progress.service.detections"]
    assert det.sum.is_monotonic
    (point,) = det.sum.data_points
    assert point.as_int == 1
    assert {kv.key: any_value(kv.value) for kv in point.attributes}["progress.reason"] == "repeat_cycle"
    assert names["progress.service.spans.received"].sum.data_points[0].as_int == 10


def test_tap_mode_acknowledges_even_when_the_tap_endpoint_is_down(make_service, client_for):
    svc = make_service(mode="tap", tap_endpoint=f"127.0.0.1:{free_port()}")
    code, _, _ = client_for(svc).export_call(request(loop_trace(22, turns=2)))
    assert code is grpc.StatusCode.OK


# -- TLS, mTLS and bearer tokens --------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if subprocess.run(["which", "openssl"], capture_output=True).returncode != 0:
        pytest.skip("openssl is needed to make test certificates")
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    (d / "san.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-extfile", "san.cnf", "-out", f"{name}.pem", cwd=d)
    return d


def test_tls_and_bearer_token(make_service, downstream, pki):
    svc = make_service(forward_endpoint=downstream.endpoint, tls_cert=str(pki / "server.pem"),
                       tls_key=str(pki / "server.key"), auth_token="s3cret")
    creds = grpc.ssl_channel_credentials(root_certificates=(pki / "ca.pem").read_bytes())
    client = Client(f"127.0.0.1:{svc.port}", creds)
    try:
        req = request(progressing_trace(31))
        code, details, _ = client.export_call(req)
        assert code is grpc.StatusCode.UNAUTHENTICATED and "Bearer" in details
        code, _, _ = client.export_call(req, metadata=[("authorization", "Bearer wrong")])
        assert code is grpc.StatusCode.UNAUTHENTICATED
        code, _, _ = client.export_call(req, metadata=[("authorization", "Bearer s3cret")])
        assert code is grpc.StatusCode.OK
        assert len(downstream.received) == 1
    finally:
        client.close()
    plain = Client(f"127.0.0.1:{svc.port}")
    try:
        code, _, _ = plain.export_call(req, timeout=2, metadata=[("authorization", "Bearer s3cret")])
        assert code is grpc.StatusCode.UNAVAILABLE  # a plaintext client cannot talk to the TLS port
    finally:
        plain.close()
    metrics = http_get(f"http://127.0.0.1:{svc.health_port}/metrics")[1]
    assert prom_value(metrics, "progress_service_requests_total", {"result": "unauthenticated"}) == 2


def test_mutual_tls_requires_a_client_certificate(make_service, downstream, pki):
    svc = make_service(forward_endpoint=downstream.endpoint, tls_cert=str(pki / "server.pem"),
                       tls_key=str(pki / "server.key"), tls_client_ca=str(pki / "ca.pem"))
    ca = (pki / "ca.pem").read_bytes()
    anonymous = Client(f"127.0.0.1:{svc.port}", grpc.ssl_channel_credentials(root_certificates=ca))
    with_cert = Client(f"127.0.0.1:{svc.port}", grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=(pki / "client.key").read_bytes(),
        certificate_chain=(pki / "client.pem").read_bytes()))
    try:
        req = request(progressing_trace(32))
        code, _, _ = anonymous.export_call(req, timeout=3)
        assert code is grpc.StatusCode.UNAVAILABLE
        code, _, _ = with_cert.export_call(req)
        assert code is grpc.StatusCode.OK
    finally:
        anonymous.close()
        with_cert.close()


# -- options ----------------------------------------------------------------------------


def test_defaults_run_with_no_arguments():
    cfg = from_args(None, environ={})
    assert cfg.listen == "127.0.0.1:4417"
    assert cfg.forward_endpoint == "127.0.0.1:4319"
    assert cfg.mode == "inline" and cfg.health_listen == "127.0.0.1:13417"
    assert cfg.max_receive_mib == 64 and cfg.workers >= 10 and cfg.max_inflight >= 10
    assert cfg.forward_timeout < 5.0  # inside the Collector's exporter timeout


def test_every_option_is_settable_from_the_environment():
    import argparse
    import dataclasses

    from otel_progress.service.options import OPTIONS, add_arguments, env_var

    names = {f.name for f in dataclasses.fields(ServiceConfig)}
    assert {o.name for o in OPTIONS} == names  # every option has a flag and a variable
    env = {env_var("mode"): "tap", env_var("listen"): "127.0.0.1:5000", env_var("max_traces"): "7",
           env_var("forward_insecure"): "false", env_var("forward_headers"): "x-a=1, X-B=two",
           env_var("trace_ttl"): "2.5"}
    cfg = from_args(None, environ=env)
    assert (cfg.mode, cfg.listen, cfg.max_traces, cfg.forward_insecure, cfg.trace_ttl) == (
        "tap", "127.0.0.1:5000", 7, False, 2.5)
    assert cfg.forward_headers == (("x-a", "1"), ("x-b", "two"))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--max-traces", "9", "--mode", "inline"])
    cfg = from_args(args, environ=env)  # flags win over the environment
    assert (cfg.max_traces, cfg.mode, cfg.listen) == (9, "inline", "127.0.0.1:5000")


@pytest.mark.parametrize("env,needle", [
    ({"OTEL_PROGRESS_SERVE_MAX_TRACES": "lots"}, "OTEL_PROGRESS_SERVE_MAX_TRACES"),
    ({"OTEL_PROGRESS_SERVE_LISTEN": "nowhere"}, "listen"),
    ({"OTEL_PROGRESS_SERVE_TLS_CERT": "/x.pem"}, "tls_key"),
    ({"OTEL_PROGRESS_SERVE_MODE": "mirror"}, "mode"),
])
def test_bad_options_name_what_is_wrong(env, needle):
    with pytest.raises(ServiceConfigError, match=needle):
        from_args(None, environ=env)


# -- the command ------------------------------------------------------------------------


def _serve(env_extra: dict[str, str], *args: str) -> subprocess.Popen[str]:
    env = env_without_serve_vars()
    env.update(env_extra)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, "-m", "otel_progress.cli", "serve", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def test_serve_command_says_where_it_listens_serves_and_stops_on_sigterm():
    ds = Downstream().start()
    port, health = free_port(), free_port()
    proc = _serve({"OTEL_PROGRESS_SERVE_LISTEN": f"127.0.0.1:{port}",
                   "OTEL_PROGRESS_SERVE_FORWARD_ENDPOINT": ds.endpoint},
                  "--health-listen", f"127.0.0.1:{health}")
    try:
        assert wait_until(lambda: http_get(f"http://127.0.0.1:{health}/readyz")[0] == 200
                          if proc.poll() is None else True, 20, 0.2)
        assert proc.poll() is None
        client = Client(f"127.0.0.1:{port}")
        client.export(request(loop_trace(41, turns=2)))
        client.close()
        assert len(ds.received) == 1
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
        ds.stop()
    assert proc.returncode == 0, err
    assert f"OTLP/gRPC on 127.0.0.1:{port}" in err
    assert f"forwarding every batch to {ds.endpoint}" in err
    assert f"http://127.0.0.1:{health}/healthz" in err
    assert "SIGTERM: draining" in err and "stopped" in err


def test_serve_command_rejects_a_bad_option_with_exit_2():
    proc = _serve({"OTEL_PROGRESS_SERVE_MAX_INFLIGHT": "0"})
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "max_inflight" in err


def test_serve_command_reports_a_port_in_use():
    ds = Downstream().start()
    try:
        proc = _serve({}, "--listen", f"127.0.0.1:{ds.port}", "--health-listen", "")
        _out, err = proc.communicate(timeout=30)
    finally:
        ds.stop()
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{ds.port}" in err
