"""A replica outage seen through the real gateway Collector (collector-config/gateway.yaml).

One plain OTLP/gRPC receiver stands in for the single `otel-progress serve` replica; it is
stopped, spans are sent, and a new receiver is started on the same port later.

* Within OTEL_PROGRESS_RETRY_MAX_ELAPSED nothing is lost, also when the outage is longer
  than the per-replica exporter's own retry (60 s in the shipped config before issue 27,
  which dropped the batches after 60 s whatever the env var said).
* Beyond it the gateway drops the spans, its self-metrics count every one of them, and the
  shipped alerts fire (OtelProgressGatewayReplicaUnreachable while it retries,
  OtelProgressGatewayExportFailing once it drops): promtool evaluates prometheus-rules.yaml
  on series made from the gateway's real /metrics scrapes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from .conftest import CONFIG_DIR, in_ci

START_TIMEOUT_S = 30
RULES = CONFIG_DIR / "alerting" / "prometheus-rules.yaml"


@pytest.fixture
def otlp(otlp_deps):
    from . import otlp_util

    return otlp_util


def _gateway_env(otlp, replica_port: int, retry_max_elapsed: str | None) -> tuple[dict[str, str], dict[str, int]]:
    p = {k: otlp.free_port() for k in ("grpc", "http", "health", "tel", "sink")}
    env = {
        "OTEL_PROGRESS_GATEWAY_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{p['grpc']}",
        "OTEL_PROGRESS_GATEWAY_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{p['http']}",
        "OTEL_PROGRESS_GATEWAY_HEALTH_ENDPOINT": f"127.0.0.1:{p['health']}",
        "OTEL_PROGRESS_GATEWAY_TELEMETRY_PORT": str(p["tel"]),
        "OTEL_PROGRESS_SINK_ENDPOINT": f"127.0.0.1:{p['sink']}",
        "OTEL_PROGRESS_REPLICAS": f"[127.0.0.1:{replica_port}]",
    }
    if retry_max_elapsed is not None:
        env["OTEL_PROGRESS_RETRY_MAX_ELAPSED"] = retry_max_elapsed
    return env, p


def _samples(text: str, name_re: str) -> dict[str, float]:
    """{'name{labels}': value} of the scraped samples whose name matches name_re."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)", line)
        if m and re.fullmatch(name_re, m.group(1)):
            out[m.group(1) + (m.group(2) or "{}")] = float(m.group(3))
    return out


def _send(otlp, endpoint: str, n_traces: int, spans_per_trace: int) -> list[bytes]:
    trace_ids = [os.urandom(16) for _ in range(n_traces)]
    spans = [otlp.make_span(t, os.urandom(8), name=f"tool-{i}") for t in trace_ids for i in range(spans_per_trace)]
    otlp.export(endpoint, otlp.make_request(spans))
    return trace_ids


def _fail(gw, msg: str) -> None:
    pytest.fail(f"{msg}\n--- gateway log (tail) ---\n{gw.log()[-4000:]}", pytrace=False)


def test_replica_outage_longer_than_60s_within_the_retry_limit_loses_nothing(
    otelcol_binary: str, otlp, tmp_path: Path
) -> None:
    outage_s = 70  # longer than the 60 s after which the old per-replica exporter gave up
    port = otlp.free_port()
    env, p = _gateway_env(otlp, port, None)  # the shipped limit, 300 s
    gw_in = f"127.0.0.1:{p['grpc']}"
    with otlp.Collector(otelcol_binary, [CONFIG_DIR / "gateway.yaml"], env, tmp_path / "gw.log") as gw:
        try:
            otlp.wait_port(p["grpc"], START_TIMEOUT_S, gw.proc)
        except (TimeoutError, RuntimeError) as exc:
            _fail(gw, str(exc))
        with otlp.FakeTraceBackend(port) as first:
            _send(otlp, gw_in, 4, 2)
            if not otlp.wait_until(lambda: len(first.spans()) >= 8, 20):
                _fail(gw, f"the replica got {len(first.spans())} of 8 spans before the outage")
        # The replica is down now.
        sent = [_send(otlp, gw_in, 10, 3) for _ in range(3)]
        expected = {t for batch in sent for t in batch}
        time.sleep(outage_s)
        with otlp.FakeTraceBackend(port) as second:
            # Delivery waits for gRPC to reconnect (its own backoff, x1.6 up to 120 s; after a
            # 70 s outage the next dial is at most ~50 s away) and then for each batch's next
            # retry (the load balancer's backoff: at most 30 s +/- 50 %).
            back = time.monotonic()
            got = otlp.wait_until(lambda: len(second.spans()) >= 90, 150)
            took = time.monotonic() - back
            received = second.spans()
            selfmetrics = otlp.http_get(f"http://127.0.0.1:{p['tel']}/metrics")
        if not got:
            _fail(gw, f"after a {outage_s}s outage the replica got {len(received)} of 90 spans in {took:.0f}s")
    print(f"outage {outage_s}s: all 90 spans delivered {took:.0f}s after the replica came back")
    assert {s.trace_id for s in received} == expected
    failed = _samples(selfmetrics, r"otelcol_exporter_(send|enqueue)_failed_spans(_total)?")
    assert not any(failed.values()), failed


def _promtool_series(scrapes: list[str], name_re: str, instance: str) -> list[dict]:
    """promtool input_series from consecutive real scrapes, one minute apart (a scrape
    without the series -> '_', no sample), with the labels a Prometheus scrape of job
    otel-progress-gateway adds."""
    per = [_samples(s, name_re) for s in scrapes]
    keys = sorted({k for d in per for k in d})
    out = []
    for key in keys:
        name, labels = key.split("{", 1)
        labels = labels.rstrip("}")
        extra = f'job="otel-progress-gateway",instance="{instance}"'
        series = f"{name}{{{labels + ',' if labels else ''}{extra}}}"
        values = " ".join(repr(d[key]) if key in d else "_" for d in per)
        out.append({"series": series, "values": values})
    return out


def test_replica_outage_beyond_the_retry_limit_is_counted_and_alerted(
    otelcol_binary: str, otlp, promtool: str, tmp_path: Path
) -> None:
    port = otlp.free_port()  # nothing listens here: the only replica is down throughout
    env, p = _gateway_env(otlp, port, "30s")  # not below max_interval (30s)
    gw_in = f"127.0.0.1:{p['grpc']}"
    metrics_url = f"http://127.0.0.1:{p['tel']}/metrics"
    n_spans = 2 * 7 * 3
    with otlp.Collector(otelcol_binary, [CONFIG_DIR / "gateway.yaml"], env, tmp_path / "gw.log") as gw:
        try:
            otlp.wait_port(p["grpc"], START_TIMEOUT_S, gw.proc)
            otlp.wait_port(p["tel"], START_TIMEOUT_S, gw.proc)
        except (TimeoutError, RuntimeError) as exc:
            _fail(gw, str(exc))
        before = otlp.http_get(metrics_url)
        for _ in range(2):
            _send(otlp, gw_in, 7, 3)
        # Scrapes every 3 s while the gateway retries, until it has given up on everything.
        during: list[str] = []
        deadline = time.monotonic() + 75
        while time.monotonic() < deadline:
            during.append(otlp.http_get(metrics_url))
            if _dropped(during[-1]) >= n_spans:
                break
            time.sleep(3)
        else:
            _fail(gw, f"gateway self-metrics count {_dropped(during[-1])} of {n_spans} dropped spans")
        time.sleep(1)
        after = otlp.http_get(metrics_url)
    assert _dropped(before) == 0
    assert _dropped(after) == n_spans
    assert len(during) >= 5, f"the gateway gave up after {len(during)} scrapes, 3 s apart"

    # The shipped rules on these real values, replayed one minute apart: 5 scrapes
    # before the spans were sent, the ones while the gateway retried, then 10 after.
    scrapes = [before] * 5 + during + [after] * 10
    names = r"otelcol_exporter_(send|enqueue)_failed_\w+|otelcol_loadbalancer_backend_outcome(_total)?"
    instance = f"127.0.0.1:{p['tel']}"
    series = _promtool_series(scrapes, names, instance)
    assert any("send_failed_spans" in s["series"] for s in series), series
    assert any("backend_outcome" in s["series"] for s in series), series
    replica = {"severity": "warning", "instance": instance, "endpoint": f"127.0.0.1:{port}"}
    dropped_at = 5 + len(during) - 1  # the first scrape with the drop counted
    test = {
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "3m", "alertname": "OtelProgressGatewayExportFailing", "exp_alerts": []},
                    {"eval_time": "3m", "alertname": "OtelProgressGatewayReplicaUnreachable", "exp_alerts": []},
                    # the first 5 scrapes of the outage (3 s apart) show failing attempts
                    {
                        "eval_time": "9m",
                        "alertname": "OtelProgressGatewayReplicaUnreachable",
                        "exp_alerts": [{"exp_labels": replica}],
                    },
                    {
                        "eval_time": f"{dropped_at + 1}m",
                        "alertname": "OtelProgressGatewayExportFailing",
                        "exp_alerts": [
                            {"exp_labels": {"severity": "warning", "instance": instance, "exporter": "load_balancing"}}
                        ],
                    },
                ],
            }
        ],
    }
    # promtool compares annotations too; they are templates of $value, so the check runs on
    # a copy of the rules without them (the expressions and labels are the shipped ones).
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    rules_copy = tmp_path / "rules.yaml"
    rules_copy.write_text(yaml.safe_dump(rules, sort_keys=False))
    test["rule_files"] = [str(rules_copy)]
    path = tmp_path / "outage.test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr + "\n" + path.read_text()


def _dropped(text: str) -> float:
    """Spans the load balancer gave up on, from one /metrics scrape."""
    vals = _samples(text, r"otelcol_exporter_send_failed_spans(_total)?")
    return sum(v for k, v in vals.items() if 'exporter="load_balancing"' in k)


def _private_hosts_wrapper(binary: str, hosts: Path, tmp_path: Path) -> str:
    """A launcher that runs `binary` in its own mount namespace with `hosts` bind-mounted on
    /etc/hosts, so the test can change what a name resolves to for the Collector only
    (Go's resolver rereads /etc/hosts when it changes).  Needs root (unshare -m)."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0) or shutil.which("unshare") is None:
        # (CI runs as root with util-linux: a missing prerequisite there is a failure, not a skip)
        (pytest.fail if in_ci() else pytest.skip)("needs root and unshare(1) to give the Collector its own /etc/hosts")
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind {hosts} /etc/hosts"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        (pytest.fail if in_ci() else pytest.skip)(
            f"cannot bind-mount /etc/hosts in a mount namespace: {probe.stderr.strip()}")
    wrapper = tmp_path / "otelcol-private-hosts"
    wrapper.write_text(
        f'#!/bin/sh\nexec unshare -m sh -c \'mount --bind {hosts} /etc/hosts && exec "$0" "$@"\' {binary} "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def test_dns_resolver_fails_over_to_the_surviving_replica(otelcol_binary: str, otlp, tmp_path: Path) -> None:
    """gateway-dns.yaml: replica B stops, and then its address leaves the DNS answer (what a
    headless Service does with a pod that is not ready).  The batches that failed for B are
    routed again on their next retry and reach A; none is lost or left for B."""
    name = "replicas.otel-progress.test"
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n127.0.0.1 {name}\n127.0.0.2 {name}\n")
    wrapper = _private_hosts_wrapper(otelcol_binary, hosts, tmp_path)
    port = otlp.free_port()
    p = {k: otlp.free_port() for k in ("grpc", "http", "health", "tel", "sink")}
    env = {
        "OTEL_PROGRESS_GATEWAY_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{p['grpc']}",
        "OTEL_PROGRESS_GATEWAY_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{p['http']}",
        "OTEL_PROGRESS_GATEWAY_HEALTH_ENDPOINT": f"127.0.0.1:{p['health']}",
        "OTEL_PROGRESS_GATEWAY_TELEMETRY_PORT": str(p["tel"]),
        "OTEL_PROGRESS_SINK_ENDPOINT": f"127.0.0.1:{p['sink']}",
        "OTEL_PROGRESS_DNS_HOSTNAME": name,
        "OTEL_PROGRESS_DNS_PORT": str(port),
        "OTEL_PROGRESS_DNS_INTERVAL": "1s",
    }
    gw_in = f"127.0.0.1:{p['grpc']}"
    metrics_url = f"http://127.0.0.1:{p['tel']}/metrics"

    def backends() -> float | None:
        vals = _samples(otlp.http_get(metrics_url), r"otelcol_loadbalancer_num_backends")
        return sum(vals.values()) if vals else None

    with (
        otlp.FakeTraceBackend(port, "127.0.0.1") as a,
        otlp.FakeTraceBackend(port, "127.0.0.2") as b,
        otlp.Collector(wrapper, [CONFIG_DIR / "gateway-dns.yaml"], env, tmp_path / "gw.log") as gw,
    ):
        try:
            otlp.wait_port(p["grpc"], START_TIMEOUT_S, gw.proc)
            otlp.wait_port(p["tel"], START_TIMEOUT_S, gw.proc)
        except (TimeoutError, RuntimeError) as exc:
            _fail(gw, str(exc))
        if not otlp.wait_until(lambda: backends() == 2, 20):
            _fail(gw, f"the DNS resolver found {backends()} replicas, not 2")
        _send(otlp, gw_in, 20, 2)
        if not otlp.wait_until(lambda: len(a.spans()) + len(b.spans()) >= 40, 20):
            _fail(gw, f"replicas got {len(a.spans())}+{len(b.spans())} of 40 spans")
        assert a.spans() and b.spans(), "all traces went to one replica"
        a_before = len(a.spans())

        b.server.stop(grace=0).wait(5)  # B is down, still in DNS
        sent = _send(otlp, gw_in, 30, 3)
        time.sleep(4)  # the batches for B fail and wait for their retry
        hosts.write_text(f"127.0.0.1 localhost\n127.0.0.1 {name}\n")  # same inode: B leaves
        if not otlp.wait_until(lambda: backends() == 1, 20):
            _fail(gw, f"the DNS resolver still has {backends()} replicas")

        # Every trace, B's included; A also gets its own part of a retried batch again
        # (the whole batch is retried), which serve counts as duplicates.
        def missing() -> set[bytes]:
            return set(sent) - {s.trace_id for s in a.spans()[a_before:]}

        got = otlp.wait_until(lambda: not missing(), 60)
        selfmetrics = otlp.http_get(metrics_url)
        if not got:
            _fail(gw, f"replica A lacks {len(missing())} of 30 traces after B left")
    per_trace: dict[bytes, set[bytes]] = {}
    for span in a.spans()[a_before:]:
        per_trace.setdefault(span.trace_id, set()).add(span.span_id)
    assert all(len(per_trace[t]) == 3 for t in sent), "a span of a failed-over trace is missing"
    failed = _samples(selfmetrics, r"otelcol_exporter_(send|enqueue)_failed_spans(_total)?")
    assert not any(failed.values()), failed
