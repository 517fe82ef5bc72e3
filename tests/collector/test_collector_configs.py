"""The built Collector accepts every config in collector-config/ (`validate`)."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from .conftest import BUILD_SCRIPT, CONFIG_DIR

# Every top-level YAML file in collector-config/ (except the ocb manifest) and
# the --config list it is validated with: overlays are merged onto their base.
CONFIG_SETS: dict[str, list[str]] = {
    "gateway.yaml": ["gateway.yaml"],
    "gateway-dns.yaml": ["gateway-dns.yaml"],
    "gateway-k8s.yaml": ["gateway-k8s.yaml"],
    "sink.yaml": ["sink.yaml"],
    "gateway-logs.yaml": ["gateway.yaml", "gateway-logs.yaml"],
    "gateway-logs-dns.yaml": ["gateway-dns.yaml", "gateway-logs-dns.yaml"],
    "gateway-logs-k8s.yaml": ["gateway-k8s.yaml", "gateway-logs-k8s.yaml"],
    "gateway-conversation.yaml": ["gateway.yaml", "gateway-logs.yaml", "gateway-conversation.yaml"],
    "gateway-conversation-dns.yaml": ["gateway-dns.yaml", "gateway-logs-dns.yaml", "gateway-conversation-dns.yaml"],
    "gateway-conversation-k8s.yaml": ["gateway-k8s.yaml", "gateway-logs-k8s.yaml", "gateway-conversation-k8s.yaml"],
    "sink-logs.yaml": ["sink.yaml", "sink-logs.yaml"],
    "sink-backends.yaml": ["sink.yaml", "sink-backends.yaml"],
    "sink-tail-sampling.yaml": ["sink.yaml", "sink-backends.yaml", "sink-tail-sampling.yaml"],
}
NOT_COLLECTOR_CONFIGS = {"builder.yaml"}

# Env a real deployment would set; validation must pass with and without it.
SAMPLE_ENV = {
    "OTEL_PROGRESS_REPLICAS": "[10.0.0.1:4417, 10.0.0.2:4417, 10.0.0.3:4417]",
    "OTEL_PROGRESS_DNS_HOSTNAME": "otel-progress-headless.otel-progress.svc.cluster.local",
    "OTEL_PROGRESS_K8S_SERVICE": "otel-progress-headless.observability",
    "OTEL_PROGRESS_TEMPO_ENDPOINT": "tempo-distributor.tempo:4317",
    "OTEL_PROGRESS_HONEYCOMB_ENDPOINT": "https://api.eu1.honeycomb.io",
    "HONEYCOMB_API_KEY": "hcaik_test_not_a_real_key",
    "OTEL_PROGRESS_SAMPLING_PERCENT": "2.5",
    "OTEL_PROGRESS_SAMPLING_DECISION_WAIT": "10s",
    "OTEL_PROGRESS_SINK_TRACES_FILE": "/var/lib/otel-progress/traces.jsonl",
    "OTEL_PROGRESS_SINK_LOGS_FILE": "/var/lib/otel-progress/logs.jsonl",
}
CONFIG_ENV_PREFIXES = ("OTEL_PROGRESS_", "HONEYCOMB_")


def _clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(CONFIG_ENV_PREFIXES)}
    env.update(extra or {})
    return env


def _config_args(files: list[str]) -> list[str]:
    args: list[str] = []
    for name in files:
        args += ["--config", str(CONFIG_DIR / name)]
    return args


def _run(binary: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [binary, *args], capture_output=True, text=True, timeout=60, env=env or _clean_env(), check=False
    )


def test_every_collector_yaml_is_covered() -> None:
    on_disk = {p.name for p in CONFIG_DIR.glob("*.yaml")} | {p.name for p in CONFIG_DIR.glob("*.yml")}
    assert on_disk - NOT_COLLECTOR_CONFIGS == set(CONFIG_SETS), (
        "add new collector-config/*.yaml files to CONFIG_SETS so that they are validated"
    )


@pytest.mark.parametrize("name", sorted(CONFIG_SETS))
@pytest.mark.parametrize("env_kind", ["defaults", "sample-env"])
def test_validate(otelcol_binary: str, name: str, env_kind: str) -> None:
    env = _clean_env(SAMPLE_ENV if env_kind == "sample-env" else None)
    proc = _run(otelcol_binary, "validate", *_config_args(CONFIG_SETS[name]), env=env)
    assert proc.returncode == 0, f"validate {CONFIG_SETS[name]} failed:\n{proc.stdout}\n{proc.stderr}"


def _print_config(binary: str, files: list[str], env: dict[str, str] | None = None) -> dict:
    proc = _run(binary, "print-config", *_config_args(files), env=_clean_env(env))
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


def _listener_addresses(cfg: dict) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for rid, rcfg in (cfg.get("receivers") or {}).items():
        for proto, pcfg in ((rcfg or {}).get("protocols") or {}).items():
            if pcfg and pcfg.get("endpoint"):
                out.append((f"receivers.{rid}.{proto}", pcfg["endpoint"]))
    for eid, ecfg in (cfg.get("extensions") or {}).items():
        if ecfg and ecfg.get("endpoint"):
            out.append((f"extensions.{eid}", ecfg["endpoint"]))
    for xid, xcfg in (cfg.get("exporters") or {}).items():
        if xid.split("/")[0] == "prometheus":
            out.append((f"exporters.{xid}", xcfg["endpoint"]))
    for i, reader in enumerate(cfg["service"]["telemetry"]["metrics"]["readers"]):
        prom = reader["pull"]["exporter"]["prometheus"]
        out.append((f"service.telemetry.metrics.readers[{i}]", f"{prom['host']}:{prom['port']}"))
    return out


@pytest.mark.parametrize("name", sorted(CONFIG_SETS))
def test_default_listeners_are_loopback(otelcol_binary: str, name: str) -> None:
    cfg = _print_config(otelcol_binary, CONFIG_SETS[name])
    listeners = _listener_addresses(cfg)
    assert listeners, "no listener found"
    for where, addr in listeners:
        assert str(addr).startswith("127.0.0.1:"), f"{name}: {where} listens on {addr} by default"


def test_gateway_and_sink_default_ports_do_not_clash(otelcol_binary: str) -> None:
    gw = {addr for _, addr in _listener_addresses(_print_config(otelcol_binary, ["gateway.yaml"]))}
    sink = {
        addr for _, addr in _listener_addresses(_print_config(otelcol_binary, CONFIG_SETS["sink-tail-sampling.yaml"]))
    }
    assert not gw & sink, f"gateway and sink both listen on {gw & sink}"


def test_gateway_load_balancing_settings(otelcol_binary: str) -> None:
    cfg = _print_config(otelcol_binary, ["gateway.yaml"])
    lb = cfg["exporters"]["load_balancing"]
    assert lb["routing_key"] == "traceID"
    retry = lb["retry_on_failure"]
    assert retry["enabled"] is True
    # Zero here (the load balancer's own default) would mean retrying in a hot loop.
    assert retry["multiplier"] > 1 and retry["initial_interval"] not in (0, "0s")
    # sending_queue is an optional block: printed (not null) means enabled.
    assert lb["sending_queue"] is not None and lb["sending_queue"]["queue_size"] > 0
    otlp = lb["protocol"]["otlp"]
    assert otlp["tls"]["insecure"] is True
    assert otlp["compression"] == "gzip"
    assert lb["resolver"]["static"]["hostnames"] == ["127.0.0.1:4417", "127.0.0.1:4418"]
    assert cfg["service"]["pipelines"]["traces"]["exporters"] == ["load_balancing"]

    # N replicas from one env var.
    cfg = _print_config(otelcol_binary, ["gateway.yaml"], {"OTEL_PROGRESS_REPLICAS": "[a:1, b:2, c:3]"})
    assert cfg["exporters"]["load_balancing"]["resolver"]["static"]["hostnames"] == ["a:1", "b:2", "c:3"]


def test_gateway_variants_differ_only_in_resolver() -> None:
    def without_resolver(name: str) -> tuple[dict, dict]:
        cfg = yaml.safe_load((CONFIG_DIR / name).read_text())
        stripped = copy.deepcopy(cfg)
        resolver = stripped["exporters"]["load_balancing"].pop("resolver")
        return stripped, resolver

    base, static = without_resolver("gateway.yaml")
    assert list(static) == ["static"]
    for name, kind in (("gateway-dns.yaml", "dns"), ("gateway-k8s.yaml", "k8s")):
        other, resolver = without_resolver(name)
        assert list(resolver) == [kind], name
        assert other == base, f"{name} drifted from gateway.yaml outside exporters.load_balancing.resolver"
    _, k8s = without_resolver("gateway-k8s.yaml")
    assert k8s["k8s"]["return_hostnames"] is True


def _resolver(lb: dict) -> dict:
    """The resolver block as print-config shows it, without the unset (null) resolver kinds."""
    return {k: v for k, v in lb["resolver"].items() if v is not None}


def test_gateway_logs_variants_differ_only_in_resolver() -> None:
    """gateway-logs-{dns,k8s}.yaml are gateway-logs.yaml with the resolver of gateway-{dns,k8s}.yaml."""

    def load(name: str) -> dict:
        return yaml.safe_load((CONFIG_DIR / name).read_text())

    def without_logs_resolver(name: str) -> tuple[dict, dict]:
        stripped = copy.deepcopy(load(name))
        return stripped, stripped["exporters"]["load_balancing/logs"].pop("resolver")

    base, static = without_logs_resolver("gateway-logs.yaml")
    assert static == load("gateway.yaml")["exporters"]["load_balancing"]["resolver"]
    for kind in ("dns", "k8s"):
        other, resolver = without_logs_resolver(f"gateway-logs-{kind}.yaml")
        assert other == base, f"gateway-logs-{kind}.yaml drifted from gateway-logs.yaml outside the resolver"
        traces_resolver = load(f"gateway-{kind}.yaml")["exporters"]["load_balancing"]["resolver"]
        assert resolver == traces_resolver, f"gateway-logs-{kind}.yaml: resolver differs from gateway-{kind}.yaml's"


@pytest.mark.parametrize("kind", ["static", "dns", "k8s"])
def test_gateway_logs_overlay_merged(otelcol_binary: str, kind: str) -> None:
    """Merged, each gateway has one resolver per load balancer, the same for traces and logs."""
    files = {
        "static": ["gateway.yaml", "gateway-logs.yaml"],
        "dns": ["gateway-dns.yaml", "gateway-logs-dns.yaml"],
        "k8s": ["gateway-k8s.yaml", "gateway-logs-k8s.yaml"],
    }[kind]
    cfg = _print_config(otelcol_binary, files, SAMPLE_ENV)
    traces_lb, logs_lb = cfg["exporters"]["load_balancing"], cfg["exporters"]["load_balancing/logs"]
    assert list(_resolver(traces_lb)) == list(_resolver(logs_lb)) == [kind]
    assert _resolver(logs_lb) == _resolver(traces_lb)
    assert traces_lb["routing_key"] == "traceID"
    assert logs_lb["routing_key"] == "attributes"
    assert logs_lb["routing_attributes"] == ["session.id", "conversation.id"]
    pipelines = cfg["service"]["pipelines"]
    assert pipelines["traces"]["exporters"] == ["load_balancing"]
    assert pipelines["logs/runs"]["exporters"] == ["load_balancing/logs"]
    assert pipelines["logs/other"]["exporters"] == ["otlp_grpc/sink"]


@pytest.mark.parametrize("kind", ["static", "dns", "k8s"])
def test_gateway_queue_and_retry_only_at_the_load_balancer(otelcol_binary: str, kind: str) -> None:
    """Issue 27: the per-replica exporters have no queue and no retry.  The load balancer
    creates them without self-metrics, and a queue of theirs accepts a batch at once, so
    the load balancer's own retry (with OTEL_PROGRESS_RETRY_MAX_ELAPSED) and re-routing
    never applied: a batch was dropped after the per-replica retry (60 s), uncounted."""
    files = {
        "static": ["gateway.yaml", "gateway-logs.yaml"],
        "dns": ["gateway-dns.yaml", "gateway-logs-dns.yaml"],
        "k8s": ["gateway-k8s.yaml", "gateway-logs-k8s.yaml"],
    }[kind]
    cfg = _print_config(otelcol_binary, files, {**SAMPLE_ENV, "OTEL_PROGRESS_RETRY_MAX_ELAPSED": "7m"})
    for name in ("load_balancing", "load_balancing/logs"):
        lb = cfg["exporters"][name]
        assert lb["retry_on_failure"]["enabled"] is True, name
        assert lb["retry_on_failure"]["max_elapsed_time"] == "7m0s", name
        assert lb["sending_queue"] is not None, name
        per_replica = lb["protocol"]["otlp"]
        assert per_replica["retry_on_failure"]["enabled"] is False, name
        assert per_replica["sending_queue"] is None, f"{name}: a per-replica queue hides failures"


CONVERSATION_LBS = ("load_balancing/sessions", "load_balancing/conversations")


def test_gateway_conversation_variants_differ_only_in_resolver() -> None:
    """gateway-conversation-{dns,k8s}.yaml are gateway-conversation.yaml with the resolver of
    gateway-{dns,k8s}.yaml on both of its load balancers."""

    def load(name: str) -> dict:
        return yaml.safe_load((CONFIG_DIR / name).read_text())

    def without_resolvers(name: str) -> tuple[dict, list[dict]]:
        stripped = copy.deepcopy(load(name))
        return stripped, [stripped["exporters"][lb].pop("resolver") for lb in CONVERSATION_LBS]

    base, static = without_resolvers("gateway-conversation.yaml")
    assert static == [load("gateway.yaml")["exporters"]["load_balancing"]["resolver"]] * 2
    for kind in ("dns", "k8s"):
        other, resolvers = without_resolvers(f"gateway-conversation-{kind}.yaml")
        assert other == base, f"gateway-conversation-{kind}.yaml drifted from gateway-conversation.yaml"
        assert resolvers == [load(f"gateway-{kind}.yaml")["exporters"]["load_balancing"]["resolver"]] * 2


@pytest.mark.parametrize("kind", ["static", "dns", "k8s"])
def test_gateway_conversation_overlay_merged(otelcol_binary: str, kind: str) -> None:
    """Merged: three trace pipelines, each span in exactly one (by its filter); the session
    spans routed on the logs' very attribute list, over the same resolver; queue and retry
    only at the load balancers (issue 27)."""
    suffix = "" if kind == "static" else f"-{kind}"
    files = [f"gateway{suffix}.yaml", f"gateway-logs{suffix}.yaml", f"gateway-conversation{suffix}.yaml"]
    cfg = _print_config(otelcol_binary, files, {**SAMPLE_ENV, "OTEL_PROGRESS_RETRY_MAX_ELAPSED": "7m"})
    lbs = cfg["exporters"]
    assert lbs["load_balancing/sessions"]["routing_attributes"] == lbs["load_balancing/logs"]["routing_attributes"]
    assert lbs["load_balancing/conversations"]["routing_attributes"] == ["gen_ai.conversation.id"]
    for name in CONVERSATION_LBS:
        lb = lbs[name]
        assert lb["routing_key"] == "attributes", name
        assert _resolver(lb) == _resolver(lbs["load_balancing"]) == _resolver(lbs["load_balancing/logs"]), name
        assert lb["retry_on_failure"]["enabled"] is True and lb["retry_on_failure"]["max_elapsed_time"] == "7m0s"
        assert lb["sending_queue"] is not None, name
        assert lb["protocol"]["otlp"]["retry_on_failure"]["enabled"] is False, name
        assert lb["protocol"]["otlp"]["sending_queue"] is None, name
    pipelines = cfg["service"]["pipelines"]
    assert {k: (v["processors"], v["exporters"]) for k, v in pipelines.items() if k.startswith("traces")} == {
        "traces/sessions": (["memory_limiter", "filter/session_spans", "batch"], ["load_balancing/sessions"]),
        "traces/conversations": (["memory_limiter", "filter/conversation_spans", "batch"],
                                 ["load_balancing/conversations"]),
        "traces": (["memory_limiter", "filter/other_spans", "batch"], ["load_balancing"]),
    }


def test_sink_pipelines(otelcol_binary: str) -> None:
    cfg = _print_config(otelcol_binary, ["sink.yaml"])
    pipelines = cfg["service"]["pipelines"]
    # No external backend in the default sink.
    exporters = {e for p in pipelines.values() for e in p["exporters"]}
    assert not {e for e in exporters if e.startswith(("otlp", "load_balancing"))}, exporters
    # delta -> cumulative before Prometheus, for every metrics pipeline that feeds it.
    for name, p in pipelines.items():
        if "prometheus" in p["exporters"]:
            assert "delta_to_cumulative" in p["processors"], name
    assert set(pipelines["metrics/detections"]["receivers"]) == {"count", "signal_to_metrics"}
    # Exact counters under any arrival order (issue 28): in every sink combination, a
    # pipeline's delta points reach delta_to_cumulative one batch at a time, stamped on
    # arrival (tests/e2e/test_sink_counts.py shows what is lost otherwise).
    for key in ("sink.yaml", "sink-logs.yaml", "sink-tail-sampling.yaml"):
        merged = _print_config(otelcol_binary, CONFIG_SETS[key], {"HONEYCOMB_API_KEY": "k"})
        assert "transform/arrival_time" in merged["processors"], key
        stamp = merged["processors"]["transform/arrival_time"]["metric_statements"]
        assert [st["statements"] for st in stamp] == [
            ["set(datapoint.time, Now())", "set(datapoint.start_time, datapoint.time)"]], key
        for name, p in merged["service"]["pipelines"].items():
            if "delta_to_cumulative" in p["processors"]:
                i = p["processors"].index("delta_to_cumulative")
                assert p["processors"][i - 2:i] == ["batch/ordered", "transform/arrival_time"], (key, name)

    full = _print_config(otelcol_binary, CONFIG_SETS["sink-tail-sampling.yaml"])
    backends = full["service"]["pipelines"]["traces/backends"]
    assert backends["exporters"] == ["otlp_grpc/tempo", "otlp_http/honeycomb"]
    assert "tail_sampling/keep_detected" in backends["processors"]
    # The archive and the metrics still see every span.
    assert "tail_sampling/keep_detected" not in full["service"]["pipelines"]["traces/detections"]["processors"]
    hc = _print_config(otelcol_binary, CONFIG_SETS["sink-backends.yaml"], {"HONEYCOMB_API_KEY": "k"})
    headers = hc["exporters"]["otlp_http/honeycomb"]["headers"]
    # print-config shows headers as [{name, value}] with secrets redacted.
    names = {h["name"] for h in headers} if isinstance(headers, list) else set(headers)
    assert "x-honeycomb-team" in names


EXPECTED_COMPONENTS = {
    "receivers": {"otlp"},
    "processors": {
        "memory_limiter",
        "batch",
        "delta_to_cumulative",
        "tail_sampling",
        "transform",
        "filter",
    },
    "exporters": {"otlp_grpc", "otlp_http", "debug", "file", "prometheus", "load_balancing"},
    "connectors": {"count", "signal_to_metrics"},
    "extensions": {"health_check"},
}


def test_components_and_versions(otelcol_binary: str) -> None:
    proc = _run(otelcol_binary, "components")
    assert proc.returncode == 0, proc.stderr
    comps = yaml.safe_load(proc.stdout)
    for kind, names in EXPECTED_COMPONENTS.items():
        have = {c["name"] for c in comps.get(kind) or []}
        assert names <= have, f"{kind}: missing {names - have}"
        for c in comps.get(kind) or []:
            assert c["module"].endswith(" v0.161.0"), c["module"]
    providers = {p["scheme"]: p["module"] for p in comps.get("providers") or []}
    assert {"env", "file", "yaml"} <= set(providers)
    for module in providers.values():
        assert module.endswith(" v1.67.0"), module


def test_build_script_reuses_cache(otelcol_binary: str) -> None:
    start = time.monotonic()
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=120, check=False)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == otelcol_binary
    assert elapsed < 30, f"cached build-collector.sh took {elapsed:.1f}s"
    # Cache dir is named after the manifest hash.
    import hashlib

    digest = hashlib.sha256((CONFIG_DIR / "builder.yaml").read_bytes()).hexdigest()[:12]
    assert Path(otelcol_binary).parent.name == f"otelcol-{digest}"


# What each k8s ConfigMap embeds (verbatim copies of collector-config/<key>).
K8S_EMBEDDED = {
    "otel-progress-gateway": {"gateway-k8s.yaml", "gateway-logs-k8s.yaml"},
    "otel-progress-sink": {"sink.yaml", "sink-logs.yaml", "sink-backends.yaml", "sink-tail-sampling.yaml"},
}


def test_k8s_configmaps_embed_the_collector_configs() -> None:
    """k8s/*.yaml ConfigMaps carry verbatim copies of the gateway and sink configs and their logs overlays."""
    k8s_dir = CONFIG_DIR / "k8s"
    embedded: dict[str, set[str]] = {}
    for path in sorted(k8s_dir.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "ConfigMap":
                continue
            name = doc["metadata"]["name"]
            for key, text in (doc.get("data") or {}).items():
                where = f"{path.name}: ConfigMap {name} key {key}"
                assert (CONFIG_DIR / key).is_file(), f"{where} is no collector-config file"
                embedded.setdefault(name, set()).add(key)
                assert text == (CONFIG_DIR / key).read_text(), f"{where}: not a verbatim copy of collector-config/{key}"
                assert yaml.safe_load(text) == yaml.safe_load((CONFIG_DIR / key).read_text()), where
    assert embedded == K8S_EMBEDDED


# The --config files each k8s Deployment runs (the sink's backend overlays are commented out).
K8S_ARGS = {
    "otel-progress-gateway": ["--config=/conf/gateway-k8s.yaml", "--config=/conf/gateway-logs-k8s.yaml"],
    "otel-progress-sink": ["--config=/conf/sink.yaml", "--config=/conf/sink-logs.yaml"],
}


def _k8s_collector_deployments() -> list[tuple[str, dict, dict[str, str]]]:
    """(deployment name, container, ConfigMap data) for each Collector Deployment in k8s/."""
    out = []
    for path in sorted((CONFIG_DIR / "k8s").glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        cms = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d["kind"] == "ConfigMap"}
        for d in docs:
            if d["kind"] != "Deployment":
                continue
            spec = d["spec"]["template"]["spec"]
            (container,) = spec["containers"]
            cm_name = next(v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v)
            out.append((d["metadata"]["name"], container, cms[cm_name]))
    return out


def test_k8s_env_names_exist_in_the_configs() -> None:
    referenced = set()
    for path in CONFIG_DIR.glob("*.yaml"):
        referenced |= set(re.findall(r"\$\{env:([A-Z0-9_]+)", path.read_text()))
    deployments = _k8s_collector_deployments()
    assert {name for name, _, _ in deployments} == {"otel-progress-gateway", "otel-progress-sink"}
    for name, container, _ in deployments:
        for var in container.get("env", []):
            assert var["name"] in referenced, f"{name}: env {var['name']} is not used by any config"


@pytest.mark.parametrize("deployment", ["otel-progress-gateway", "otel-progress-sink"])
def test_k8s_collector_deployments_validate(otelcol_binary: str, deployment: str, tmp_path: Path) -> None:
    """The Collector accepts the ConfigMap configs with the Deployment's args and env."""
    (name, container, data) = next(d for d in _k8s_collector_deployments() if d[0] == deployment)
    for key, text in data.items():
        (tmp_path / key).write_text(text)
    env = {v["name"]: v["value"] for v in container.get("env", []) if "value" in v}
    env["HONEYCOMB_API_KEY"] = "from-a-secret"
    args = [a.replace("/conf/", f"{tmp_path}/") for a in container["args"]]
    # Also the commented-out backend overlays of the sink.
    extra = [f"--config={tmp_path}/{k}" for k in ("sink-backends.yaml", "sink-tail-sampling.yaml") if k in data]
    assert container["args"] == K8S_ARGS[deployment]
    for argv in (args, args + extra):
        proc = _run(otelcol_binary, "validate", *argv, env=_clean_env(env))
        assert proc.returncode == 0, f"{name} {argv}:\n{proc.stdout}\n{proc.stderr}"

    # The merged config runs the logs pipelines, on the listeners the pod and Services expose.
    proc = _run(otelcol_binary, "print-config", *args, env=_clean_env(env))
    assert proc.returncode == 0, proc.stderr
    cfg = yaml.safe_load(proc.stdout)
    pipelines = cfg["service"]["pipelines"]
    ports = {p["containerPort"] for p in container["ports"]}
    grpc = cfg["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert grpc.startswith("0.0.0.0:") and int(grpc.rsplit(":", 1)[1]) in ports
    for signal in ("traces", "logs"):
        assert any(p.split("/")[0] == signal and "otlp" in v["receivers"] for p, v in pipelines.items()), signal
    if deployment == "otel-progress-gateway":
        lb, lb_logs = cfg["exporters"]["load_balancing"], cfg["exporters"]["load_balancing/logs"]
        assert list(_resolver(lb_logs)) == ["k8s"] and _resolver(lb_logs) == _resolver(lb)
        assert pipelines["logs/runs"]["exporters"] == ["load_balancing/logs"]
    else:
        assert pipelines["logs/archive"]["exporters"] == ["file/logs"]
        assert cfg["exporters"]["file/logs"]["path"].startswith("/data/")


def test_k8s_replicas_serve_logs_on_the_gateway_port() -> None:
    """The gateway's resolvers (traces and logs) point at the port the replicas' headless Service exposes."""
    docs = [d for d in yaml.safe_load_all((CONFIG_DIR / "k8s" / "otel-progress.yaml").read_text()) if d]
    (svc,) = [d for d in docs if d["kind"] == "Service"]
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    listen = next(v["value"] for v in container["env"] if v["name"] == "OTEL_PROGRESS_SERVE_LISTEN")
    (gateway,) = [d for d in _k8s_collector_deployments() if d[0] == "otel-progress-gateway"]
    env = {v["name"]: v["value"] for v in gateway[1]["env"] if "value" in v}
    port = int(env["OTEL_PROGRESS_K8S_PORT"])
    assert port in {p["port"] for p in svc["spec"]["ports"]}
    assert int(listen.rsplit(":", 1)[1]) == port
    assert env["OTEL_PROGRESS_K8S_SERVICE"] == f"{svc['metadata']['name']}.{svc['metadata']['namespace']}"
    for key in ("gateway-k8s.yaml", "gateway-logs-k8s.yaml"):
        assert "OTEL_PROGRESS_K8S_PORT" in gateway[2][key] and "OTEL_PROGRESS_K8S_SERVICE" in gateway[2][key]


def test_k8s_replicas_keep_their_run_state_on_a_volume_of_their_own() -> None:
    """The StatefulSet's checkpoint directory (--state-dir) is a volumeClaimTemplates volume,
    so a restarted pod reads back its own checkpoint (docs/service.md)."""
    from otel_progress.service.options import ENV_PREFIX

    docs = [d for d in yaml.safe_load_all((CONFIG_DIR / "k8s" / "otel-progress.yaml").read_text()) if d]
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    env = {v["name"]: v.get("value") for v in container["env"]}
    state_dir = env[ENV_PREFIX + "STATE_DIR"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    templates = {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]}
    assert mounts[state_dir] in templates
