"""The end-to-end pipeline's parts, shared by tests/e2e/test_pipeline.py and
tests/e2e/test_scale.py: the sink Collector (collector-config/sink.yaml), `otel-progress
serve` replicas forwarding to it, the gateway Collector (collector-config/gateway.yaml,
static resolver) sharding by trace ID over them, the scripted SDK agent (agent.py), and
the readers of what reached the sink."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from otel_progress import ProgressEngine
from otel_progress.conventions.spans import SpanRecord
from otel_progress.otlp.files import ReadProblem, iter_documents, spans_from_request
from otel_progress.scan.analyse import analyse_trace
from tests.service.helpers import free_port, http_get, prom_value, wait_until

from .conftest import REPO, Procs

CONFIG = REPO / "collector-config"
AGENT = Path(__file__).with_name("agent.py")
DETECTION_EVENTS = ("no_progress", "livelock")


# -- what reached the sink ----------------------------------------------------------------


def sink_spans(path: Path) -> list[SpanRecord]:
    """Every span in the sink's file exporter output (and its rotated backups)."""
    out: list[SpanRecord] = []
    files = sorted(path.parent.glob(path.stem + "*"))
    for f in files:
        with open(f, "rb") as fh:
            for item in iter_documents(fh, str(f)):
                if isinstance(item, ReadProblem):
                    continue  # a line still being written
                _line, doc = item
                try:
                    out.extend(spans_from_request(doc))
                except ValueError:
                    continue
    return out


def manifest(path: Path) -> list[dict[str, Any]]:
    """The spans an agent created (agent.py's manifest)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_all_arrived(sink_file: Path, wanted: set[str], timeout: float) -> list[SpanRecord]:
    """The sink's spans once every span id of ``wanted`` is among them (fails the test
    after ``timeout``), read again 2.5 s later so that duplicates in flight show."""
    def check() -> list[SpanRecord] | None:
        spans = sink_spans(sink_file)
        got = {s.span_id for s in spans}
        return spans if wanted <= got else None

    spans = wait_until(check, timeout, 1.0)
    if spans is None:
        spans = sink_spans(sink_file)
        missing = wanted - {s.span_id for s in spans}
        pytest.fail(f"{len(missing)} of {len(wanted)} spans never reached the sink, e.g. {sorted(missing)[:5]}")
    time.sleep(2.5)  # let batches in flight land, so that duplicates would show
    return sink_spans(sink_file)


def detections_on_tools(spans: Iterable[SpanRecord]) -> dict[str, set[tuple[str, str, int]]]:
    """trace id -> {(span id, reason, turn)} of the detection events on tool spans."""
    out: dict[str, set[tuple[str, str, int]]] = defaultdict(set)
    for s in spans:
        if s.attributes.get("gen_ai.operation.name") != "execute_tool":
            continue
        for name, attrs in s.events:
            if name in DETECTION_EVENTS:
                out[s.trace_id].add((s.span_id, str(attrs["progress.reason"]), int(attrs["progress.turn"])))
    return out


def expected_detections(spans: Iterable[SpanRecord]) -> dict[str, list[Any]]:
    """trace id -> the agent-scope detections the engine finds reading the whole trace
    (scan's path: what one replica finds when nothing disrupts the run)."""
    by_trace: dict[str, dict[str, SpanRecord]] = defaultdict(dict)
    for s in spans:
        by_trace[s.trace_id].setdefault(s.span_id, s)  # a span delivered twice is one span
    out: dict[str, list[Any]] = defaultdict(list)
    for trace_id, records in by_trace.items():
        report = analyse_trace(list(records.values()), ProgressEngine())
        out[trace_id] = [d for d in report.detections if d.scope.value == "agent"]
    return out


# -- the processes --------------------------------------------------------------------------


class Pipeline:
    """The sink, serve replicas and the gateway of one test, on free ports, as processes
    of ``procs``. Replicas are named (``a``, ``b``, ...); ``serve_args`` are added to every
    replica's command line (a replica's own are given to :meth:`start_replica`)."""

    def __init__(self, procs: Procs, otelcol: str, workdir: Path, serve_args: Sequence[str] = ()) -> None:
        self.procs = procs
        self.otelcol = otelcol
        self.workdir = workdir
        self.serve_args = list(serve_args)
        self.ports: dict[str, int] = {}
        self.sink_file = workdir / "sink" / "traces.jsonl"
        self.logs_file = workdir / "sink" / "logs.jsonl"
        self.common = {"OTEL_PROGRESS_TELEMETRY_HOST": "127.0.0.1", "OTEL_PROGRESS_LOG_LEVEL": "info"}
        self.gateway_overlay = workdir / "gateway-replicas.yaml"
        self.gateway_consumers: int | None = None  # the load balancer's sending_queue.num_consumers (else the shipped)

    def port(self, name: str) -> int:
        if name not in self.ports:
            self.ports[name] = free_port()
        return self.ports[name]

    # the sink
    def start_sink(self) -> None:
        self.procs.start("sink", [self.otelcol, "--config", str(CONFIG / "sink.yaml")], env={
            **self.common,
            "OTEL_PROGRESS_SINK_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{self.port('sink_grpc')}",
            "OTEL_PROGRESS_SINK_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{self.port('sink_http')}",
            "OTEL_PROGRESS_SINK_PROMETHEUS_ENDPOINT": f"127.0.0.1:{self.port('sink_prom')}",
            "OTEL_PROGRESS_SINK_TRACES_FILE": str(self.sink_file),
            "OTEL_PROGRESS_SINK_LOGS_FILE": str(self.logs_file),  # (serve's detection records)
            "OTEL_PROGRESS_SINK_HEALTH_ENDPOINT": f"127.0.0.1:{self.port('sink_health')}",
            "OTEL_PROGRESS_SINK_TELEMETRY_PORT": str(self.port("sink_tel")),
        })

    # the replicas
    def start_replica(self, name: str, args: Sequence[str] = ()) -> subprocess.Popen[bytes]:
        return self.procs.start(
            f"replica-{name}", [sys.executable, "-m", "otel_progress.cli", "serve", *self.serve_args, *args], env={
                "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                "OTEL_PROGRESS_SERVE_LISTEN": f"127.0.0.1:{self.port(name)}",
                "OTEL_PROGRESS_SERVE_HEALTH_LISTEN": f"127.0.0.1:{self.port(name + '_health')}",
                "OTEL_PROGRESS_SERVE_FORWARD_ENDPOINT": f"127.0.0.1:{self.port('sink_grpc')}",
                "OTEL_PROGRESS_SERVE_INSTANCE_ID": f"replica-{name}",
                "OTEL_PROGRESS_SERVE_HEALTH_TRACES": "true",  # /traces: which replica owns which trace
            })

    def replica_ready(self, name: str) -> bool:
        return http_get(f"http://127.0.0.1:{self.port(name + '_health')}/readyz")[0] == 200

    def replica_metric(self, name: str, metric: str) -> float:
        return prom_value(http_get(f"http://127.0.0.1:{self.port(name + '_health')}/metrics")[1], metric)

    def received(self, name: str) -> float:
        """Spans replica ``name`` received since it started."""
        return self.replica_metric(name, "progress_service_spans_received_total")

    def wait_ready(self, names: Iterable[str], timeout: float = 60) -> None:
        names = list(names)
        if not wait_until(lambda: all(self.replica_ready(n) for n in names), timeout, 0.1):
            pytest.fail(f"replicas {names} not ready within {timeout}s\n"
                        + "\n".join(self.procs.log(f"replica-{n}") for n in names))

    def stop_replica(self, name: str, sig: int = signal.SIGTERM) -> int | None:
        return self.procs.stop(f"replica-{name}", sig)

    # the gateway
    def write_replicas(self, names: Iterable[str]) -> None:
        """The gateway's static replica list, in a config file merged over gateway.yaml (so
        that a SIGHUP reloads it)."""
        hosts = ", ".join(f"127.0.0.1:{self.port(n)}" for n in names)
        consumers = "" if self.gateway_consumers is None else \
            f"    sending_queue:\n      num_consumers: {self.gateway_consumers}\n"
        self.gateway_overlay.write_text(
            f"exporters:\n  load_balancing:\n{consumers}    resolver:\n      static:\n        hostnames: [{hosts}]\n")

    def start_gateway(self, replicas: Iterable[str], env: Mapping[str, str] | None = None) -> None:
        self.write_replicas(replicas)
        self.procs.start("gateway", [self.otelcol, "--config", str(CONFIG / "gateway.yaml"),
                                     "--config", f"file:{self.gateway_overlay}"], env={
            **self.common,
            "OTEL_PROGRESS_GATEWAY_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{self.port('gw_grpc')}",
            "OTEL_PROGRESS_GATEWAY_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{self.port('gw_http')}",
            "OTEL_PROGRESS_SINK_ENDPOINT": f"127.0.0.1:{self.port('sink_grpc')}",
            "OTEL_PROGRESS_GATEWAY_HEALTH_ENDPOINT": f"127.0.0.1:{self.port('gw_health')}",
            "OTEL_PROGRESS_GATEWAY_TELEMETRY_PORT": str(self.port("gw_tel")),
            **(env or {}),
        })

    def reload_gateway(self, replicas: Iterable[str]) -> None:
        """A new static replica list, applied by the gateway's config reload (SIGHUP)."""
        self.write_replicas(replicas)
        self.procs.procs["gateway"].send_signal(signal.SIGHUP)

    def gateway_metric(self, metric: str, labels: Mapping[str, str] | None = None) -> float:
        text = http_get(f"http://127.0.0.1:{self.port('gw_tel')}/metrics")[1]
        return prom_value(text, metric, labels)

    @property
    def gateway_endpoint(self) -> str:
        return f"127.0.0.1:{self.port('gw_grpc')}"

    def health_ok(self, name: str) -> bool:
        return http_get(f"http://127.0.0.1:{self.port(name)}/")[0] == 200

    def wait_collectors(self, timeout: float = 60) -> None:
        for what in ("sink_health", "gw_health"):
            if what in self.ports and not wait_until(lambda w=what: self.health_ok(w), timeout, 0.25):
                logs = "\n".join(f"--- {n}\n{self.procs.log(n)}" for n in self.procs.procs)
                pytest.fail(f"{what} did not become ready within {timeout}s\n{logs}")

    # the agents
    def agent(self, name: str, out: Path, *, runs: int, turns: int = 6, loop_every: int = 3, pace: float,
              prefix: str, parallel: int = 1) -> subprocess.Popen[bytes]:
        return self.procs.start(name, [
            sys.executable, str(AGENT), "--endpoint", self.gateway_endpoint, "--runs", str(runs),
            "--turns", str(turns), "--loop-every", str(loop_every), "--pace", str(pace), "--prefix", prefix,
            "--manifest", str(out), "--parallel", str(parallel)])
