"""Small OTLP/gRPC helpers for the Collector tests (no otel_progress imports).

Built on the `opentelemetry-proto` and `grpcio` PyPI packages.  Imported lazily
by the tests, after the `otlp_deps` fixture has made sure both are installed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from concurrent import futures
from contextlib import closing
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

# --------------------------------------------------------------------------- ports


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before port {port} opened")
        with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"port 127.0.0.1:{port} did not open within {timeout}s")


def wait_until(pred: Callable[[], Any], timeout: float, interval: float = 0.25) -> Any:
    """Poll pred() until it returns something truthy; return it, or the last value at timeout."""
    deadline = time.monotonic() + timeout
    value = pred()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = pred()
    return value


def http_get(url: str, timeout: float = 2.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode("utf-8", "replace")


# --------------------------------------------------------------------------- spans


def _any(value: Any) -> common_pb2.AnyValue:
    if isinstance(value, bool):
        return common_pb2.AnyValue(bool_value=value)
    if isinstance(value, int):
        return common_pb2.AnyValue(int_value=value)
    if isinstance(value, float):
        return common_pb2.AnyValue(double_value=value)
    return common_pb2.AnyValue(string_value=str(value))


def attrs(mapping: Mapping[str, Any]) -> list[common_pb2.KeyValue]:
    return [common_pb2.KeyValue(key=k, value=_any(v)) for k, v in mapping.items()]


def make_span(
    trace_id: bytes,
    span_id: bytes,
    name: str = "execute_tool search",
    attributes: Mapping[str, Any] | None = None,
    events: Iterable[tuple[str, Mapping[str, Any]]] = (),
    parent_span_id: bytes = b"",
) -> trace_pb2.Span:
    now = time.time_ns()
    return trace_pb2.Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_span_id,
        name=name,
        kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=now - 5_000_000,
        end_time_unix_nano=now,
        attributes=attrs(attributes or {}),
        events=[
            trace_pb2.Span.Event(time_unix_nano=now - 1_000_000, name=ev_name, attributes=attrs(ev_attrs))
            for ev_name, ev_attrs in events
        ],
    )


def make_request(
    spans: Iterable[trace_pb2.Span], service_name: str = "agent-under-test"
) -> trace_service_pb2.ExportTraceServiceRequest:
    return trace_service_pb2.ExportTraceServiceRequest(
        resource_spans=[
            trace_pb2.ResourceSpans(
                resource=resource_pb2.Resource(attributes=attrs({"service.name": service_name})),
                scope_spans=[
                    trace_pb2.ScopeSpans(
                        scope=common_pb2.InstrumentationScope(name="otel-progress-test"),
                        spans=list(spans),
                    )
                ],
            )
        ]
    )


def detection_span(trace_id: bytes, span_id: bytes, agent: str = "planner") -> trace_pb2.Span:
    """A tool-call span as otel-progress annotates it: attributes + a no_progress event."""
    return make_span(
        trace_id,
        span_id,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "search",
            "gen_ai.agent.name": agent,
            "progress.detected": True,
            "progress.reason": "repeat_cycle",
            "progress.level": 3,
        },
        events=[
            (
                "no_progress",
                {
                    "progress.reason": "repeat_cycle",
                    "progress.turn": 7,
                    "progress.level": 3,
                    "progress.scope": "agent",
                },
            )
        ],
    )


def export(endpoint: str, request: trace_service_pb2.ExportTraceServiceRequest, timeout: float = 10.0):
    with grpc.insecure_channel(endpoint) as channel:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        return stub.Export(request, timeout=timeout)


# --------------------------------------------------------------------------- fake OTLP/gRPC backend


class _Recorder(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.metadata: list[dict[str, str]] = []
        self.lock = threading.Lock()

    def Export(self, request, context):
        with self.lock:
            self.requests.append(request)
            self.metadata.append({k: v for k, v in context.invocation_metadata()})
        return trace_service_pb2.ExportTraceServiceResponse()


class FakeTraceBackend:
    """An OTLP/gRPC TraceService on `host` that records what it is sent (on `port`, or a
    free one); a stopped one can be replaced by a new one on the same port."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        self.recorder = _Recorder()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self.recorder, self.server)
        self.port = self.server.add_insecure_port(f"{host}:{port}")
        self.endpoint = f"{host}:{self.port}"

    def __enter__(self) -> FakeTraceBackend:
        self.server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop(grace=1).wait(5)

    def trace_ids(self) -> set[bytes]:
        with self.recorder.lock:
            return {
                span.trace_id
                for req in self.recorder.requests
                for rs in req.resource_spans
                for ss in rs.scope_spans
                for span in ss.spans
            }

    def spans(self) -> list[trace_pb2.Span]:
        with self.recorder.lock:
            return [
                span
                for req in self.recorder.requests
                for rs in req.resource_spans
                for ss in rs.scope_spans
                for span in ss.spans
            ]


# --------------------------------------------------------------------------- Collector process


class Collector:
    """Runs the built Collector with some --config files and env; stops it on exit."""

    def __init__(self, binary: str, configs: list[Path], env: Mapping[str, str], log_path: Path) -> None:
        self.binary = binary
        self.configs = configs
        self.env = {**os.environ, **env}
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self._log = None

    def start(self) -> Collector:
        args = [self.binary]
        for cfg in self.configs:
            args += ["--config", str(cfg)]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(args, env=self.env, stdout=self._log, stderr=subprocess.STDOUT)
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Collector:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
