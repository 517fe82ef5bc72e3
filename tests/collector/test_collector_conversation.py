"""The gateway routing by conversation (collector-config/gateway-conversation.yaml, an
overlay on gateway.yaml and gateway-logs.yaml), in the real Collector:

* spans naming a conversation (``gen_ai.conversation.id``) reach one replica per
  conversation, whatever their trace; spans naming none are spread over the replicas by
  trace ID, no trace split;
* a coding CLI's session: its log records (``session.id``, gateway-logs.yaml) and its spans
  (``session.id`` on each span, as Claude Code sends them) meet on one replica;
* end to end, with two real ``otel-progress serve`` replicas: a chat agent on the real SDK
  that does the same lookups with the same answers turn after turn (one trace per turn) is
  caught once, with scope ``conversation``; a healthy chat stays quiet; a real CLI's golden
  capture (logs and spans of one session, both detecting its loop) is reported through one
  signal only (by trace ID its spans met its records on one replica only by chance, and
  then both replicas reported the loop).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import CONFIG_DIR

REPO = CONFIG_DIR.parent
START_TIMEOUT_S = 30
DATA_TIMEOUT_S = 20
OVERLAYS = [CONFIG_DIR / "gateway.yaml", CONFIG_DIR / "gateway-logs.yaml", CONFIG_DIR / "gateway-conversation.yaml"]


@pytest.fixture
def otlp(otlp_deps: None) -> Any:
    from . import otlp_util

    return otlp_util


def _replica(otlp: Any) -> Any:
    """A fake replica: the fake trace backend, also recording LogsService/Export."""
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc

    class Logs(logs_service_pb2_grpc.LogsServiceServicer):
        def __init__(self) -> None:
            self.requests: list[Any] = []

        def Export(self, request: Any, context: Any) -> Any:
            self.requests.append(request)
            return logs_service_pb2.ExportLogsServiceResponse()

    backend = otlp.FakeTraceBackend()
    backend.logs = Logs()
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(backend.logs, backend.server)
    return backend


def _gateway_env(otlp: Any, replicas: list[str]) -> tuple[dict[str, str], str]:
    p = {k: otlp.free_port() for k in ("grpc", "http", "health", "tel", "sink")}
    return {
        "OTEL_PROGRESS_GATEWAY_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{p['grpc']}",
        "OTEL_PROGRESS_GATEWAY_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{p['http']}",
        "OTEL_PROGRESS_GATEWAY_HEALTH_ENDPOINT": f"127.0.0.1:{p['health']}",
        "OTEL_PROGRESS_GATEWAY_TELEMETRY_PORT": str(p["tel"]),
        "OTEL_PROGRESS_SINK_ENDPOINT": f"127.0.0.1:{p['sink']}",
        "OTEL_PROGRESS_REPLICAS": f"[{', '.join(replicas)}]",
    }, f"127.0.0.1:{p['grpc']}"


def _str_attr(attributes: Any, key: str) -> str | None:
    return next((kv.value.string_value for kv in attributes if kv.key == key), None)


def _log_request(otlp: Any, session: str, n: int) -> Any:
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.logs.v1 import logs_pb2
    from opentelemetry.proto.resource.v1 import resource_pb2

    records = [logs_pb2.LogRecord(time_unix_nano=time.time_ns(), body=common_pb2.AnyValue(string_value="tool_result"),
                                  attributes=otlp.attrs({"event.name": "claude_code.tool_result", "session.id": session,
                                                         "tool_name": "Bash", "seq": i}))
               for i in range(n)]
    return logs_service_pb2.ExportLogsServiceRequest(resource_logs=[logs_pb2.ResourceLogs(
        resource=resource_pb2.Resource(attributes=otlp.attrs({"service.name": "claude-code"})),
        scope_logs=[logs_pb2.ScopeLogs(scope=common_pb2.InstrumentationScope(name="com.anthropic.claude_code.events"),
                                       log_records=records)])])


def test_spans_route_by_conversation_or_session_and_the_rest_by_trace_id(otelcol_binary: str, otlp: Any,
                                                                         tmp_path: Path) -> None:
    import grpc
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc

    conversations = [f"chat-{i}" for i in range(6)]
    sessions = [f"session-{i:04x}" for i in range(8)]
    r0, r1 = _replica(otlp), _replica(otlp)
    with r0, r1:
        env, endpoint = _gateway_env(otlp, [r0.endpoint, r1.endpoint])
        with otlp.Collector(otelcol_binary, OVERLAYS, env, tmp_path / "gateway.log") as gw:
            try:
                otlp.wait_port(int(endpoint.rsplit(":", 1)[1]), START_TIMEOUT_S, gw.proc)
            except (TimeoutError, RuntimeError) as exc:
                pytest.fail(f"{exc}\n{gw.log()[-4000:]}")
            spans = []
            for conv in conversations:  # 3 turns, one trace each, the conversation id on every span
                for _turn in range(3):
                    tid = os.urandom(16)
                    spans += [otlp.make_span(tid, os.urandom(8), name=name, attributes={
                        "gen_ai.conversation.id": conv}) for name in ("invoke_agent support", "execute_tool get")]
            plain = [os.urandom(16) for _ in range(24)]
            spans += [otlp.make_span(tid, os.urandom(8), name=f"execute_tool t{i}") for tid in plain for i in range(2)]
            for session in sessions:  # Claude Code: session.id (and gen_ai.conversation.id) on each span
                tid = os.urandom(16)
                spans += [otlp.make_span(tid, os.urandom(8), name=name, attributes={
                    "session.id": session, "gen_ai.conversation.id": session})
                    for name in ("claude_code.interaction", "claude_code.tool")]
            for i in range(0, len(spans), 16):  # batches mixing everything, as an SDK's would
                otlp.export(endpoint, otlp.make_request(spans[i:i + 16]))
            with grpc.insecure_channel(endpoint) as channel:
                stub = logs_service_pb2_grpc.LogsServiceStub(channel)
                for session in sessions:
                    stub.Export(_log_request(otlp, session, 3), timeout=10)
            total = len(spans)
            done = otlp.wait_until(lambda: len(r0.spans()) + len(r1.spans()) >= total
                                   and len(r0.logs.requests) + len(r1.logs.requests) >= 1, DATA_TIMEOUT_S)
            time.sleep(0.5)  # the last log batches
            if not done:
                pytest.fail(f"replicas got {len(r0.spans())}+{len(r1.spans())} of {total} spans\n{gw.log()[-4000:]}")

    def where(backend: Any, key: str) -> set[str]:
        return {v for s in backend.spans() if (v := _str_attr(s.attributes, key)) is not None}

    # one replica per conversation, its spans whole
    by_conv = [where(r0, "gen_ai.conversation.id") & set(conversations),
               where(r1, "gen_ai.conversation.id") & set(conversations)]
    assert not by_conv[0] & by_conv[1], "a conversation was split across replicas"
    assert by_conv[0] | by_conv[1] == set(conversations)
    # the rest by trace ID: spread over both, no trace split
    plain_ids = [{s.trace_id for s in b.spans() if s.trace_id in set(plain)} for b in (r0, r1)]
    assert plain_ids[0] and plain_ids[1], "spans without a conversation id all went to one replica"
    assert not plain_ids[0] & plain_ids[1] and plain_ids[0] | plain_ids[1] == set(plain)
    # a session's spans and log records on the same replica
    logs_at = [{_str_attr(rec.attributes, "session.id") for req in b.logs.requests for rl in req.resource_logs
                for sl in rl.scope_logs for rec in sl.log_records} for b in (r0, r1)]
    spans_at = [where(b, "session.id") for b in (r0, r1)]
    assert logs_at[0] | logs_at[1] == set(sessions) == spans_at[0] | spans_at[1]
    for session in sessions:
        assert [session in s for s in spans_at] == [session in s for s in logs_at], (
            f"{session}: spans on {spans_at}, log records on {logs_at}")
    assert not spans_at[0] & spans_at[1]


# -- end to end: the gateway, two serve replicas, the chat agent on the real SDK ----------------


def _serve(port: int, health: int, forward: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OTEL_PROGRESS_SERVE_LISTEN": f"127.0.0.1:{port}",
           "OTEL_PROGRESS_SERVE_HEALTH_LISTEN": f"127.0.0.1:{health}",
           "OTEL_PROGRESS_SERVE_FORWARD_ENDPOINT": forward,
           "OTEL_PROGRESS_SERVE_DETECTION_EVENTS": "span"}
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "otel_progress.cli", "serve"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO)


def _ready(otlp: Any, health: int) -> bool:
    """/readyz answers 200 (``http_get`` raises on 503 or no answer)."""
    try:
        otlp.http_get(f"http://127.0.0.1:{health}/readyz")
    except OSError:
        return False
    return True


def test_a_conversation_looping_across_traces_is_caught_once_behind_the_gateway(
        otelcol_binary: str, otlp: Any, tmp_path: Path) -> None:
    from tests.chat_agent import main as chat_agent

    ports = {k: otlp.free_port() for k in ("a", "a_health", "b", "b_health")}
    procs: list[subprocess.Popen[bytes]] = []
    with otlp.FakeTraceBackend() as sink:
        try:
            for name in ("a", "b"):
                procs.append(_serve(ports[name], ports[f"{name}_health"], sink.endpoint, tmp_path / f"{name}.log"))
            for name in ("a", "b"):
                if not otlp.wait_until(lambda n=name: _ready(otlp, ports[f"{n}_health"]), 60, 0.1):
                    pytest.fail(f"replica {name} not ready\n{(tmp_path / f'{name}.log').read_text()}")
            env, endpoint = _gateway_env(otlp, [f"127.0.0.1:{ports['a']}", f"127.0.0.1:{ports['b']}"])
            with otlp.Collector(otelcol_binary, OVERLAYS, env, tmp_path / "gateway.log") as gw:
                otlp.wait_port(int(endpoint.rsplit(":", 1)[1]), START_TIMEOUT_S, gw.proc)
                for args in (["--conversation", "conv-loop", "--turns", "4"],
                             ["--conversation", "conv-ok", "--turns", "6", "--healthy"]):
                    assert chat_agent(["--endpoint", endpoint, *args]) == 0
                expected = 4 * 4 + 6 * 3  # spans: agent, chat and the tool calls of each turn
                if not otlp.wait_until(lambda: len(sink.spans()) >= expected, DATA_TIMEOUT_S):
                    logs = "\n".join((tmp_path / f"{n}.log").read_text()[-2000:] for n in ("a", "b"))
                    pytest.fail(f"sink got {len(sink.spans())} of {expected} spans\n{gw.log()[-3000:]}\n{logs}")
                time.sleep(0.5)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        spans = sink.spans()

    events = [(s, e) for s in spans for e in s.events if e.name in ("livelock", "no_progress")]
    assert len(events) == 1, [(s.name, e.name, [(a.key, a.value) for a in e.attributes]) for s, e in events]
    span, event = events[0]
    assert span.name == "invoke_agent support"
    assert _str_attr(span.attributes, "gen_ai.conversation.id") == "conv-loop"
    assert event.name == "livelock" and _str_attr(event.attributes, "progress.scope") == "conversation"
    assert next(a.value.int_value for a in event.attributes if a.key == "progress.turn") == 4
    # the healthy chat's spans carry no detection
    assert not [s for s in spans if _str_attr(s.attributes, "gen_ai.conversation.id") == "conv-ok"
                and any(a.key == "progress.detected" for a in s.attributes)]


# -- a coding CLI's logs and spans of one session: one replica, one report ----------------------


def _golden(name: str) -> list[dict[str, Any]]:
    """The CLI's log and trace exports of a golden capture, in the order it sent them."""
    import json

    from tests.logs.conftest import GOLDEN

    docs = []
    for suffix in (".jsonl", ".traces.jsonl"):
        docs += [json.loads(line) for line in (GOLDEN / f"{name}{suffix}").read_text().splitlines() if line.strip()]

    def first_time(doc: dict[str, Any]) -> int:
        times = [int(r.get("timeUnixNano") or r.get("observedTimeUnixNano") or 0) for rl in doc.get("resourceLogs", [])
                 for sl in rl.get("scopeLogs", []) for r in sl.get("logRecords", [])]
        times += [int(s["endTimeUnixNano"]) for rs in doc.get("resourceSpans", []) for ss in rs.get("scopeSpans", [])
                  for s in ss.get("spans", [])]
        return min((t for t in times if t), default=0)

    return sorted(docs, key=first_time)


@pytest.mark.parametrize("name", ["claude-code-2.1.332-loop-details", "gemini-cli-0.61.0-loop"])
def test_a_coding_clis_logs_and_spans_meet_on_one_replica_and_report_once(
        otelcol_binary: str, otlp: Any, tmp_path: Path, name: str) -> None:
    """The golden capture of a real CLI whose logs and spans both detect the loop (see
    tests/logs/test_one_report.py, one serve): through the gateway and two replicas, its
    detections reach the sink through one signal only."""
    import grpc
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    from tests.logs.conftest import b64_ids

    ports = {k: otlp.free_port() for k in ("a", "a_health", "b", "b_health")}
    procs: list[subprocess.Popen[bytes]] = []
    sink = _replica(otlp)
    with sink:
        try:
            for replica in ("a", "b"):
                procs.append(_serve(ports[replica], ports[f"{replica}_health"], sink.endpoint,
                                    tmp_path / f"{replica}.log"))
            for replica in ("a", "b"):
                if not otlp.wait_until(lambda n=replica: _ready(otlp, ports[f"{n}_health"]), 60, 0.1):
                    pytest.fail(f"replica {replica} not ready\n{(tmp_path / f'{replica}.log').read_text()}")
            env, endpoint = _gateway_env(otlp, [f"127.0.0.1:{ports['a']}", f"127.0.0.1:{ports['b']}"])
            with otlp.Collector(otelcol_binary, OVERLAYS, env, tmp_path / "gateway.log") as gw:
                otlp.wait_port(int(endpoint.rsplit(":", 1)[1]), START_TIMEOUT_S, gw.proc)
                sent = 0
                with grpc.insecure_channel(endpoint) as channel:
                    logs_stub = logs_service_pb2_grpc.LogsServiceStub(channel)
                    traces_stub = trace_service_pb2_grpc.TraceServiceStub(channel)
                    for doc in _golden(name):
                        if "resourceLogs" in doc:
                            request = json_format.ParseDict(b64_ids(doc), logs_service_pb2.ExportLogsServiceRequest(),
                                                            ignore_unknown_fields=True)
                            logs_stub.Export(request, timeout=10)
                        else:
                            request = json_format.ParseDict(b64_ids(doc), trace_service_pb2.ExportTraceServiceRequest(),
                                                            ignore_unknown_fields=True)
                            sent += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
                            traces_stub.Export(request, timeout=10)
                        time.sleep(0.02)  # as the CLI sends them, one export after the other
                if not otlp.wait_until(lambda: len(sink.spans()) >= sent, DATA_TIMEOUT_S):
                    pytest.fail(f"sink got {len(sink.spans())} of {sent} spans\n{gw.log()[-3000:]}")
                time.sleep(1.0)  # the last log batches
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
    span_reports = [e for s in sink.spans() for e in s.events if e.name in ("livelock", "no_progress")]
    log_reports = [r for req in sink.logs.requests for rl in req.resource_logs for sl in rl.scope_logs
                   for r in sl.log_records if r.event_name in ("progress.no_progress", "progress.livelock")]
    assert span_reports or log_reports, "the loop was not reported"
    assert not (span_reports and log_reports), (
        f"reported through both signals: {len(span_reports)} span events, {len(log_reports)} log records")
