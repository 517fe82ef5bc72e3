"""Helpers for the service tests: OTLP spans, a recording downstream OTLP/gRPC server,
clients, free ports. Everything runs on 127.0.0.1 with real grpcio servers."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent import futures
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_progress.service.otlp import EXPORT_METHOD, any_value, key_values

Request = trace_service_pb2.ExportTraceServiceRequest
Response = trace_service_pb2.ExportTraceServiceResponse

T0 = 1_700_000_000_000_000_000


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(pred: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    value = pred()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = pred()
    return value


def http_get(url: str, timeout: float = 3.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:  # connection refused, timeout: not up (yet)
        return 0, str(exc)


def prom_value(text: str, name: str, labels: Mapping[str, str] | None = None) -> float:
    """Sum of the samples of ``name`` (matching ``labels``) in Prometheus text."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        metric, _, label_text = head.partition("{")
        if metric != name:
            continue
        found = dict(part.split("=", 1) for part in label_text.rstrip("}").split(",") if "=" in part)
        found = {k: v.strip('"') for k, v in found.items()}
        if labels and any(found.get(k) != v for k, v in labels.items()):
            continue
        total += float(value)
    return total


# -- spans ----------------------------------------------------------------------------


def tid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def sid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def span(trace: int, span_id: int, parent: int | None, name: str, start_s: float, end_s: float,
         attrs: Mapping[str, Any] | None = None, error: bool = False) -> trace_pb2.Span:
    s = trace_pb2.Span(
        trace_id=tid(trace), span_id=sid(span_id), parent_span_id=sid(parent) if parent else b"",
        name=name, kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=T0 + int(start_s * 1e9), end_time_unix_nano=T0 + int(end_s * 1e9),
    )
    s.attributes.extend(key_values(dict(attrs or {})))
    if error:
        s.status.code = trace_pb2.Status.STATUS_CODE_ERROR
    return s


def tool_span(trace: int, span_id: int, parent: int, turn: int, tool: str = "search",
              args: Any = None, result: Any = None, agent: str | None = None) -> trace_pb2.Span:
    attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}
    attrs["gen_ai.tool.call.arguments"] = args if args is not None else {"q": "weather in paris"}
    attrs["gen_ai.tool.call.result"] = json.dumps(result if result is not None else {"items": []})
    if agent:
        attrs["gen_ai.agent.name"] = agent
    return span(trace, span_id, parent, f"execute_tool {tool}", turn * 2.0, turn * 2.0 + 0.5, attrs)


def chat_span(trace: int, span_id: int, parent: int, turn: int, tokens: int = 100) -> trace_pb2.Span:
    return span(trace, span_id, parent, "chat gpt", turn * 2.0 - 1.0, turn * 2.0 - 0.1, {
        "gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": tokens,
        "gen_ai.usage.output_tokens": 10,
    })


def agent_span(trace: int, span_id: int, parent: int | None, turns: int, name: str = "researcher"
               ) -> trace_pb2.Span:
    return span(trace, span_id, parent, f"invoke_agent {name}", 0.0, turns * 2.0 + 1.0, {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name,
    })


def http_span(trace: int, span_id: int, parent: int | None, at: float) -> trace_pb2.Span:
    return span(trace, span_id, parent, "GET /api", at, at + 0.1, {
        "http.request.method": "GET", "url.full": "https://example.invalid/api", "http.response.status_code": 200,
    })


def loop_trace(trace: int, turns: int = 6, *, agent_root: bool = True, args: Any = None) -> list[trace_pb2.Span]:
    """A single-agent run calling the same tool with the same arguments and result:
    root invoke_agent span (id 1), per turn a chat span and a tool span."""
    spans: list[trace_pb2.Span] = []
    for t in range(1, turns + 1):
        spans.append(chat_span(trace, 100 + t, 1, t))
        spans.append(tool_span(trace, 200 + t, 1, t, args=args))
    spans.append(agent_span(trace, 1, None if agent_root else 9, turns))
    return spans


def barren_chat_turn(trace: int, conversation: str) -> list[trace_pb2.Span]:
    """One turn of a chat agent, a trace of its own (its ``invoke_agent`` span naming
    ``conversation``): the same lookup with the same answer every turn."""
    agent = agent_span(trace, 1, None, 1, name="support")
    agent.attributes.extend(key_values({"gen_ai.conversation.id": conversation}))
    return [chat_span(trace, 101, 1, 1), tool_span(trace, 201, 1, 1, tool="lookup", args={"order": "A-17"},
                                                   result={"status": "shipped"}), agent]


def progressing_trace(trace: int, turns: int = 6) -> list[trace_pb2.Span]:
    """A run that makes progress: a different query and result every turn."""
    spans: list[trace_pb2.Span] = []
    for t in range(1, turns + 1):
        spans.append(chat_span(trace, 100 + t, 1, t))
        spans.append(tool_span(trace, 200 + t, 1, t, args={"q": f"topic {t}"}, result={"items": [f"r{t}"]}))
    spans.append(agent_span(trace, 1, None, turns))
    return spans


def request(spans: Iterable[trace_pb2.Span], service: str = "agent-svc") -> Request:
    rs = trace_pb2.ResourceSpans(resource=resource_pb2.Resource(attributes=key_values({"service.name": service})))
    ss = rs.scope_spans.add(scope=common_pb2.InstrumentationScope(name="test.agent"))
    ss.spans.extend(spans)
    return Request(resource_spans=[rs])


def all_spans(req: Request) -> list[trace_pb2.Span]:
    return [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]


def attrs_of(items: Iterable[common_pb2.KeyValue]) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in items}


def detections_on(req: Request) -> list[tuple[str, str, dict[str, Any]]]:
    """``(span id hex, event name, event attributes)`` of every detection event."""
    out = []
    for s in all_spans(req):
        for ev in s.events:
            if ev.name in ("no_progress", "livelock"):
                out.append((s.span_id.hex(), ev.name, attrs_of(ev.attributes)))
    return out


# -- downstream -----------------------------------------------------------------------


@dataclass
class Downstream:
    """A real OTLP/gRPC server that records what it receives and can be told to fail."""

    port: int = 0
    received: list[bytes] = field(default_factory=list)
    fail_codes: list[grpc.StatusCode] = field(default_factory=list)
    delay: float = 0.0
    partial: int = 0
    calls: int = 0
    active: int = 0
    max_active: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: Any = None
    max_receive_bytes: int = 128 * 1024 * 1024  # grpc's receive limit (a Collector's is 4 MiB)
    accept_logs: bool = True  # serve LogsService/Export too (False: answer it UNIMPLEMENTED, as a Collector
    # without a logs pipeline does)

    def start(self, port: int = 0) -> Downstream:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=32),
                                  options=[("grpc.max_receive_message_length", self.max_receive_bytes),
                                           ("grpc.so_reuseport", 0)])

        def export(raw: bytes, context: grpc.ServicerContext) -> Response:
            with self.lock:
                self.calls += 1
                self.active += 1
                self.max_active = max(self.max_active, self.active)
                code = self.fail_codes.pop(0) if self.fail_codes else None
            try:
                if self.delay:
                    time.sleep(self.delay)
                if code is not None:
                    context.abort(code, f"downstream told to fail with {code.name}")
                with self.lock:
                    self.received.append(bytes(raw))
                if self.partial:
                    return Response(partial_success=trace_service_pb2.ExportTracePartialSuccess(
                        rejected_spans=self.partial, error_message="some spans rejected"))
                return Response()
            finally:
                with self.lock:
                    self.active -= 1

        handler = grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService",
            {"Export": grpc.unary_unary_rpc_method_handler(
                export, request_deserializer=None, response_serializer=Response.SerializeToString)},
        )
        metrics_handler = grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.metrics.v1.MetricsService",
            {"Export": grpc.unary_unary_rpc_method_handler(
                self._metrics, request_deserializer=None, response_serializer=lambda b: b"")},
        )
        logs_handler = grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.logs.v1.LogsService",
            {"Export": grpc.unary_unary_rpc_method_handler(
                self._logs, request_deserializer=None, response_serializer=lambda b: b"")},
        )
        self.metrics_received: list[bytes] = []
        self.logs_received: list[bytes] = []
        handlers = (handler, metrics_handler) + ((logs_handler,) if self.accept_logs else ())
        self.server.add_generic_rpc_handlers(handlers)
        self.port = self.server.add_insecure_port(f"127.0.0.1:{port}")
        assert self.port
        self.server.start()
        return self

    def _metrics(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        with self.lock:
            self.metrics_received.append(bytes(raw))
        return b""

    def _logs(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        with self.lock:
            self.logs_received.append(bytes(raw))
        return b""

    def log_records(self) -> list[Any]:
        """The log records received (LogsService/Export), in order."""
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

        with self.lock:
            raws = list(self.logs_received)
        return [r for raw in raws for rl in ExportLogsServiceRequest.FromString(raw).resource_logs
                for sl in rl.scope_logs for r in sl.log_records]

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def requests(self) -> list[Request]:
        with self.lock:
            return [Request.FromString(r) for r in self.received]

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(0).wait(5)


class Client:
    """An OTLP/gRPC client sending raw requests to the service."""

    def __init__(self, target: str, credentials: grpc.ChannelCredentials | None = None,
                 options: Sequence[tuple[str, Any]] = ()) -> None:
        opts = [("grpc.max_send_message_length", 128 * 1024 * 1024), *options]
        self.channel = (grpc.secure_channel(target, credentials, options=opts) if credentials
                        else grpc.insecure_channel(target, options=opts))
        self._export = self.channel.unary_unary(EXPORT_METHOD, request_serializer=lambda b: b,
                                                response_deserializer=Response.FromString)

    def export(self, req: Request | bytes, timeout: float = 5.0, metadata: Sequence[tuple[str, str]] = (),
               compression: grpc.Compression | None = None) -> Response:
        raw = req if isinstance(req, bytes) else req.SerializeToString()
        return self._export(raw, timeout=timeout, metadata=metadata or None, compression=compression)

    def export_call(self, req: Request | bytes, timeout: float = 5.0,
                    metadata: Sequence[tuple[str, str]] = ()) -> tuple[grpc.StatusCode, str, dict[str, Any]]:
        """Export and return (code, details, trailing metadata) instead of raising."""
        raw = req if isinstance(req, bytes) else req.SerializeToString()
        try:
            _resp, call = self._export.with_call(raw, timeout=timeout, metadata=metadata or None)
            return grpc.StatusCode.OK, "", dict(call.trailing_metadata() or ())
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or "", dict(exc.trailing_metadata() or ())  # type: ignore[attr-defined]

    def close(self) -> None:
        self.channel.close()


def retry_delay(trailers: Mapping[str, Any]) -> float | None:
    """The RetryInfo delay in the grpc-status-details-bin trailer (decoded with
    googleapis-common-protos), or None."""
    raw = trailers.get("grpc-status-details-bin")
    if not raw:
        return None
    from google.rpc import error_details_pb2, status_pb2

    status = status_pb2.Status.FromString(raw)
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return info.retry_delay.seconds + info.retry_delay.nanos / 1e9
    return None


def env_without_serve_vars() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_PROGRESS_")}
