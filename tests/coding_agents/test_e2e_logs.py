"""End to end for coding agents' log events, on 127.0.0.1 and bounded in time:

the real Codex CLI (npm, native binary, against the scripted Responses API), and golden
OTLP/JSON logs captured from the real CLIs (tests/coding_agents/golden) sent as the CLIs
send them (OTLP/HTTP JSON to /v1/logs) -> the real gateway Collector
(gateway.yaml + gateway-logs.yaml: load_balancing routed on session.id /
conversation.id) -> ``otel-progress serve`` (inline, two replicas) -> the real sink
Collector (sink.yaml + sink-logs.yaml) -> the detection is in the sink's log file (the
marked tool record, the progress.no_progress record and the gen_ai.evaluation.result
record, raw arguments digested) and in its Prometheus metrics (the count connector's
progress_detection_events_total and progress_evaluation_results_total, and the service's
own pushed progress_service_detections_total).
"""

from __future__ import annotations

import contextlib
import json
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from otel_progress import Config
from otel_progress.service.options import ServiceConfig
from otel_progress.service.server import ProgressService
from tests.collector.conftest import CONFIG_DIR, otelcol_binary, otlp_deps  # noqa: F401 (fixtures)

GOLDEN = Path(__file__).parent / "golden"
TIMEOUT_S = 40


@pytest.fixture
def otlp(otlp_deps):  # noqa: F811
    from tests.collector import otlp_util

    return otlp_util


def _post_logs(endpoint: str, line: str) -> int:
    request = urllib.request.Request(f"{endpoint}/v1/logs", data=line.encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


def _records(path: Path) -> list[dict]:
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        for rl in json.loads(line).get("resourceLogs", []):
            for sl in rl.get("scopeLogs", []):
                out.extend(sl.get("logRecords", []))
    return out


def _attrs(record: dict) -> dict:
    return {kv["key"]: next(iter(kv["value"].values()), None) for kv in record.get("attributes", [])}


def _conversation(name: str) -> str:
    for line in (GOLDEN / name).read_text().splitlines():
        for rl in json.loads(line).get("resourceLogs", []) if line.strip() else []:
            for sl in rl.get("scopeLogs", []):
                for record in sl.get("logRecords", []):
                    if _attrs(record).get("conversation.id"):
                        return _attrs(record)["conversation.id"]
    raise AssertionError(f"no conversation.id in {name}")


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for match in re.finditer(rf"^{name}(\{{[^}}]*\}})?\s+(\S+)$", text, re.M):
        got = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(match.group(2))
    return total


@dataclass
class Pipeline:
    """The running pipeline: where to send, and what came out."""

    gateway_http: str
    logs_file: Path
    prometheus: str
    replicas: list[ProgressService]
    gateway: Any
    sink: Any

    def detections(self) -> list[dict]:
        return [r for r in _records(self.logs_file) if r.get("eventName") == "progress.no_progress"]

    def logs(self) -> str:
        return f"--- gateway ---\n{self.gateway.log()[-3000:]}\n--- sink ---\n{self.sink.log()[-3000:]}"


@contextlib.contextmanager
def _pipeline(binary: str, otlp: Any, tmp_path: Path) -> Iterator[Pipeline]:
    """Sink Collector, two ``otel-progress serve`` replicas, gateway Collector, on free ports."""
    port = {k: otlp.free_port() for k in ("s_grpc", "s_http", "s_prom", "s_health", "s_tel",
                                          "g_grpc", "g_http", "g_health", "g_tel")}
    logs_file = tmp_path / "out" / "logs.jsonl"
    sink_env = {
        "OTEL_PROGRESS_SINK_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{port['s_grpc']}",
        "OTEL_PROGRESS_SINK_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{port['s_http']}",
        "OTEL_PROGRESS_SINK_PROMETHEUS_ENDPOINT": f"127.0.0.1:{port['s_prom']}",
        "OTEL_PROGRESS_SINK_HEALTH_ENDPOINT": f"127.0.0.1:{port['s_health']}",
        "OTEL_PROGRESS_SINK_TELEMETRY_PORT": str(port["s_tel"]),
        "OTEL_PROGRESS_SINK_TRACES_FILE": str(tmp_path / "out" / "traces.jsonl"),
        "OTEL_PROGRESS_SINK_LOGS_FILE": str(logs_file),
    }
    replicas: list[ProgressService] = []
    with otlp.Collector(binary, [CONFIG_DIR / "sink.yaml", CONFIG_DIR / "sink-logs.yaml"], sink_env,
                        tmp_path / "sink.log") as sink:
        try:
            otlp.wait_port(port["s_grpc"], TIMEOUT_S, sink.proc)
            for i in range(2):  # distinct instance ids: one process holds both replicas here
                replicas.append(ProgressService(ServiceConfig(
                    listen="127.0.0.1:0", health_listen="", instance_id=f"replica-{i}",
                    forward_endpoint=f"127.0.0.1:{port['s_grpc']}",
                    metrics_endpoint=f"127.0.0.1:{port['s_grpc']}", metrics_interval=0.5, drain_timeout=1.0,
                ), Config()).start())
            gateway_env = {
                "OTEL_PROGRESS_GATEWAY_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{port['g_grpc']}",
                "OTEL_PROGRESS_GATEWAY_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{port['g_http']}",
                "OTEL_PROGRESS_GATEWAY_HEALTH_ENDPOINT": f"127.0.0.1:{port['g_health']}",
                "OTEL_PROGRESS_GATEWAY_TELEMETRY_PORT": str(port["g_tel"]),
                "OTEL_PROGRESS_SINK_ENDPOINT": f"127.0.0.1:{port['s_grpc']}",
                "OTEL_PROGRESS_REPLICAS": "[" + ", ".join(f"127.0.0.1:{s.port}" for s in replicas) + "]",
            }
            with otlp.Collector(binary, [CONFIG_DIR / "gateway.yaml", CONFIG_DIR / "gateway-logs.yaml"],
                                gateway_env, tmp_path / "gateway.log") as gateway:
                otlp.wait_port(port["g_http"], TIMEOUT_S, gateway.proc)
                yield Pipeline(f"http://127.0.0.1:{port['g_http']}", logs_file,
                               f"http://127.0.0.1:{port['s_prom']}/metrics", replicas, gateway, sink)
        finally:
            for service in replicas:
                service.stop(grace=0.5)


def _prometheus(otlp: Any, url: str) -> str:
    try:
        return otlp.http_get(url)
    except OSError:
        return ""


def test_cli_logs_through_gateway_serve_and_sink(otelcol_binary: str, otlp, tmp_path: Path) -> None:  # noqa: F811
    with _pipeline(otelcol_binary, otlp, tmp_path) as pipe:
        sent = 0
        for name in ("codex-0.171.0-loop.jsonl", "claude-code-2.1.332-failing-command-details.jsonl",
                     "gemini-cli-0.61.0-loop.jsonl", "qwen-code-0.24.4-failing-edit.jsonl",
                     "codex-0.171.0-poll.jsonl"):  # healthy; one request begins with a record without run id
            for line in (GOLDEN / name).read_text().splitlines():
                if line.strip():
                    assert _post_logs(pipe.gateway_http, line) == 200
                    sent += 1
        assert sent
        if not otlp.wait_until(lambda: len(pipe.detections()) >= 5, TIMEOUT_S):
            pytest.fail(f"no detection records in the sink's file\n{pipe.logs()}", pytrace=False)
        reasons = sorted(_attrs(r)["progress.reason"] for r in pipe.detections())
        # (Codex's six identical commands: a re-check, then the loop at turns 3 and 6)
        assert reasons == ["error_recurrence", "error_recurrence", "frequency", "repeat_cycle", "repeat_cycle"]
        records = _records(pipe.logs_file)
        marked = [r for r in records if _attrs(r).get("progress.detected") is True
                  and not r.get("eventName", "").startswith("progress.")]
        assert len(marked) == 5
        # each detection also as a gen_ai.evaluation.result record (--detection-events both), in the
        # offending record's span context where it has one (Claude Code, Gemini CLI, Qwen Code; not Codex)
        evaluations = [r for r in records if r.get("eventName") == "gen_ai.evaluation.result"]
        assert sorted(_attrs(r)["gen_ai.evaluation.score.label"] for r in evaluations) == reasons
        assert sorted(bool(r.get("traceId")) for r in evaluations) == [False] * 2 + [True] * 3
        by_call = {_attrs(r)["progress.annotates.tool_call.id"]: r for r in pipe.detections()}
        assert all(r.get("traceId", "") == by_call[_attrs(r)["progress.annotates.tool_call.id"]].get("traceId", "")
                   for r in evaluations)
        # every detection was written beside its tool record (none detached from it); a run split
        # over the two replicas would have lost turns and given fewer detections than above
        assert all(s.metrics.value("progress.service.detections.detached") == 0 for s in pipe.replicas)
        # records without a run id (Codex's metrics-client warning) go around the replicas to the sink
        # (only Codex's captures have such records)
        assert otlp.wait_until(lambda: any(not _attrs(r).get("conversation.id") and not _attrs(r).get("session.id")
                                           for r in _records(pipe.logs_file)), TIMEOUT_S)
        poll = [r for r in _records(pipe.logs_file) if _attrs(r).get("event.name") == "codex.tool_result"
                and _attrs(r).get("conversation.id") == _conversation("codex-0.171.0-poll.jsonl")]
        assert poll and not any("progress.detected" in _attrs(r) for r in poll)
        # raw arguments and outputs are digested before storage
        codex = [r for r in records if _attrs(r).get("event.name") == "codex.tool_result"]
        assert codex and all(re.fullmatch(r"[0-9a-f]{64}", _attrs(r)["arguments"]) for r in codex)
        assert all(re.fullmatch(r"[0-9a-f]{64}", _attrs(r)["output"]) for r in codex)

        def complete(text: str) -> bool:
            return (_metric(text, "progress_detection_events_total", progress_reason="repeat_cycle") >= 2
                    and _metric(text, "progress_evaluation_results_total") >= 5
                    and _metric(text, "progress_service_detections_total") >= 5)

        text = otlp.wait_until(lambda: (t := _prometheus(otlp, pipe.prometheus)) and complete(t) and t, TIMEOUT_S)
        series = [x for x in _prometheus(otlp, pipe.prometheus).splitlines() if "detection" in x and x[:1] != "#"]
        assert text, "sink metrics missing the detections:\n" + "\n".join(series)
        assert _metric(text, "progress_detection_events_total", progress_reason="error_recurrence",
                       progress_event="no_progress") == 2
        # the evaluation records' count: one per detection, as the shipped alerts read it
        assert _metric(text, "progress_evaluation_results_total") == 5
        assert _metric(text, "progress_evaluation_results_total", progress_reason="error_recurrence",
                       progress_event="no_progress") == 2


def test_real_codex_cli_through_gateway_serve_and_sink(otelcol_binary: str, otlp, tmp_path: Path) -> None:  # noqa: F811
    """The real Codex CLI (npm, native binary) exporting OTLP/HTTP JSON logs to the gateway."""
    from .test_codex_cli import http_exporter, run_codex

    with _pipeline(otelcol_binary, otlp, tmp_path) as pipe:
        run_codex("loop", tmp_path, http_exporter(pipe.gateway_http))
        if not otlp.wait_until(lambda: len(pipe.detections()) >= 2, TIMEOUT_S):  # (turns 3 and 6)
            pytest.fail(f"no detection records in the sink's file\n{pipe.logs()}", pytrace=False)
        assert {_attrs(r)["progress.reason"] for r in pipe.detections()} == {"repeat_cycle"}
        assert all(_attrs(r)["conversation.id"] for r in pipe.detections())
        text = otlp.wait_until(lambda: (t := _prometheus(otlp, pipe.prometheus)) and _metric(
            t, "progress_detection_events_total", progress_reason="repeat_cycle") >= 2 and t, TIMEOUT_S)
        assert text, "the sink's metrics never counted the detections"
