"""``otel-progress serve``'s LogsService/Export over real gRPC on 127.0.0.1: the golden
captures of the real CLIs sent as OTLP protobuf, annotated records forwarded to a real
gRPC sink (inline) or only detection records to the tap target, the same auth and retry
answers as traces, a retried request annotated again and counted once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub

from otel_progress import Config
from otel_progress.service.options import ServiceConfig
from otel_progress.service.server import ProgressService

from .conftest import b64_ids, documents, golden


class LogsSink:
    """A real OTLP/gRPC LogsService that records requests and can be told to fail."""

    def __init__(self) -> None:
        self.received: list[ExportLogsServiceRequest] = []
        self.fail_codes: list[grpc.StatusCode] = []
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.so_reuseport", 0)])
        handler = grpc.method_handlers_generic_handler("opentelemetry.proto.collector.logs.v1.LogsService", {
            "Export": grpc.unary_unary_rpc_method_handler(
                self._export, request_deserializer=ExportLogsServiceRequest.FromString,
                response_serializer=ExportLogsServiceResponse.SerializeToString)})
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _export(self, request: ExportLogsServiceRequest, context: grpc.ServicerContext) -> ExportLogsServiceResponse:
        with self.lock:
            code = self.fail_codes.pop(0) if self.fail_codes else None
        if code is not None:
            context.abort(code, f"told to fail with {code.name}")
        with self.lock:
            self.received.append(request)
        return ExportLogsServiceResponse()

    def records(self) -> list[Any]:
        with self.lock:
            return [r for req in self.received for rl in req.resource_logs for sl in rl.scope_logs
                    for r in sl.log_records]


def _requests(name: str) -> list[ExportLogsServiceRequest]:
    return [json_format.ParseDict(b64_ids(doc), ExportLogsServiceRequest(), ignore_unknown_fields=True)
            for doc in documents(golden(name))]


@pytest.fixture
def sink() -> Iterator[LogsSink]:
    s = LogsSink()
    yield s
    s.server.stop(0)


def _service(**options: Any) -> ProgressService:
    options.setdefault("listen", "127.0.0.1:0")
    options.setdefault("health_listen", "")
    options.setdefault("drain_timeout", 1.0)
    return ProgressService(ServiceConfig(**options), Config()).start()


def _attrs(record: Any) -> dict[str, Any]:
    return {kv.key: json_format.MessageToDict(kv.value) for kv in record.attributes}


def _send(port: int, requests: list[ExportLogsServiceRequest], metadata: tuple = ()) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = LogsServiceStub(channel)
        for request in requests:
            stub.Export(request, timeout=10, metadata=metadata)


def test_inline_annotates_and_forwards(sink: LogsSink) -> None:
    service = _service(forward_endpoint=f"127.0.0.1:{sink.port}")
    try:
        requests = _requests("codex-0.171.0-loop.jsonl")
        _send(service.port, requests)
        records = sink.records()
        assert len(records) == sum(len(sl.log_records) for r in requests for rl in r.resource_logs
                                   for sl in rl.scope_logs) + 4  # everything forwarded, plus 2 detections
        # (--detection-events both: each a progress.no_progress and a gen_ai.evaluation.result record)
        assert sum(r.event_name == "gen_ai.evaluation.result" for r in records) == 2
        events = [r for r in records if r.event_name == "progress.no_progress"]
        assert [_attrs(e)["progress.turn"] for e in events] == [{"intValue": "3"}, {"intValue": "6"}]
        first = _attrs(events[0])
        assert first["event.name"] == {"stringValue": "progress.no_progress"}
        assert first["progress.reason"] == {"stringValue": "repeat_cycle"}
        assert "conversation.id" in first and "progress.annotates.tool_call.id" in first
        marked = [r for r in records if r.event_name not in ("progress.no_progress", "gen_ai.evaluation.result")
                  and "progress.detected" in _attrs(r)]
        assert len(marked) == 2 and all(_attrs(r)["progress.level"]["intValue"] in "123" for r in marked)
        # never raw arguments or outputs in annotations
        raw = [_attrs(r).get("arguments") for r in marked]
        for event in events:
            text = event.SerializeToString()
            assert all(a is None or a["stringValue"].encode() not in text for a in raw)
        assert service.metrics.value("progress.service.detections", {
            "progress.reason": "repeat_cycle", "progress.level": 1, "progress.scope": "agent",
            "progress.event": "no_progress"}) == 1
        assert service.metrics.value("progress.service.log_records.read") > 0
        assert "progress_service_log_records_received_total" in service.metrics.prometheus_text()
    finally:
        service.stop(grace=0.5)


def test_retry_is_annotated_again_and_counted_once(sink: LogsSink) -> None:
    service = _service(forward_endpoint=f"127.0.0.1:{sink.port}")
    try:
        whole = ExportLogsServiceRequest()
        for request in _requests("claude-code-2.1.332-failing-command-details.jsonl"):
            whole.MergeFrom(request)
        sink.fail_codes = [grpc.StatusCode.UNAVAILABLE]
        with pytest.raises(grpc.RpcError) as info:
            _send(service.port, [whole])
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE  # not acknowledged: the sender retries
        assert sink.records() == []
        _send(service.port, [whole])  # the retry
        events = [r for r in sink.records() if r.event_name.startswith("progress.")]
        assert len(events) == 1 and _attrs(events[0])["progress.reason"] == {"stringValue": "error_recurrence"}
        assert sum(v for _, v in _series(service, "progress.service.detections")) == 1
        sink.fail_codes = [grpc.StatusCode.INVALID_ARGUMENT]
        with pytest.raises(grpc.RpcError) as info:
            _send(service.port, [whole])
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # permanent: the sender drops it
    finally:
        service.stop(grace=0.5)


def _series(service: ProgressService, name: str) -> list[tuple[Any, float]]:
    for definition, values in service.metrics.snapshot():
        if definition.name == name:
            return values
    return []


def test_auth_and_bad_request(sink: LogsSink) -> None:
    service = _service(forward_endpoint=f"127.0.0.1:{sink.port}", auth_token="s3cret")
    try:
        requests = _requests("qwen-code-0.24.4-healthy.jsonl")
        with pytest.raises(grpc.RpcError) as info:
            _send(service.port, requests)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        _send(service.port, requests, metadata=(("authorization", "Bearer s3cret"),))
        assert sink.records() and not any(r.event_name.startswith("progress.") for r in sink.records())
        with grpc.insecure_channel(f"127.0.0.1:{service.port}") as channel:
            export = channel.unary_unary("/opentelemetry.proto.collector.logs.v1.LogsService/Export",
                                         request_serializer=lambda b: b, response_deserializer=lambda b: b)
            with pytest.raises(grpc.RpcError) as info:
                export(b"\xff\xff\xff", timeout=5, metadata=(("authorization", "Bearer s3cret"),))
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        service.stop(grace=0.5)


def test_tap_sends_only_detection_records(sink: LogsSink) -> None:
    service = _service(mode="tap", tap_endpoint=f"127.0.0.1:{sink.port}", detection_events="span")
    try:
        sink.fail_codes = [grpc.StatusCode.UNAVAILABLE]  # the tap retries it
        _send(service.port, _requests("gemini-cli-0.61.0-failing-edit.jsonl"))
        deadline = time.monotonic() + 10
        while not sink.records() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert service.metrics.value("progress.service.tap.failures") == 1
        records = sink.records()
        assert records and all(r.event_name == "progress.no_progress" for r in records)
        assert _attrs(records[0])["progress.reason"] == {"stringValue": "error_recurrence"}
        assert _attrs(records[0])["progress.evidence_level"] == {"stringValue": "arguments"}
    finally:
        service.stop(grace=0.5)


def test_sdk_otlp_log_exporter_to_serve(sink: LogsSink) -> None:
    """The OpenTelemetry SDK's own OTLP/gRPC log exporter (as a Python agent would send
    logs) replaying Codex CLI's records: the loop arrives annotated at the sink."""
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    from otel_progress.otlp.logs_json import records_from_request

    service = _service(forward_endpoint=f"127.0.0.1:{sink.port}")
    provider = LoggerProvider(resource=Resource.create({"service.name": "codex_exec"}))
    try:
        provider.add_log_record_processor(SimpleLogRecordProcessor(
            OTLPLogExporter(endpoint=f"127.0.0.1:{service.port}", insecure=True, timeout=10)))
        logger = provider.get_logger("codex_otel")
        for doc in documents(golden("codex-0.171.0-loop.jsonl")):
            for view in records_from_request(doc):
                attributes = {k: v for k, v in view.attributes.items() if isinstance(v, (str, int, float, bool))}
                logger.emit(timestamp=view.time_ns, observed_timestamp=view.observed_ns, body=view.body,
                            attributes=attributes, event_name=view.event_name or None)
        provider.force_flush(10_000)
        events = [r for r in sink.records() if r.event_name == "progress.no_progress"]
        assert [_attrs(e)["progress.reason"]["stringValue"] for e in events] == ["repeat_cycle"] * 2
        marked = [r for r in sink.records() if r.event_name == "codex.tool_result" and "progress.detected" in _attrs(r)]
        assert len(marked) == 2  # the SDK sets event_name; the reader finds it there
    finally:
        provider.shutdown()
        service.stop(grace=0.5)


def test_idle_log_runs_end() -> None:
    """The service's log runs end after the idle TTL (no end event exists), freeing state."""
    from otel_progress import ProgressEngine
    from otel_progress.service.logs import LogsDetector
    from otel_progress.service.metrics import ServiceMetrics

    engine = ProgressEngine()
    detector = LogsDetector(engine, ServiceMetrics(), idle_seconds=30)
    for request in _requests("codex-0.171.0-healthy.jsonl"):
        detector.process(request.SerializeToString())
    assert detector.open_runs == 1 and engine.active_runs == 1
    assert detector.maintain(time.monotonic() + 10) == [] and detector.open_runs == 1
    detector.maintain(time.monotonic() + 31)
    assert detector.open_runs == 0 and engine.active_runs == 0


def test_call_ids_are_per_run(sink: LogsSink) -> None:
    """Two runs whose tool calls have the same ids (call ids are only unique within a run):
    each gets its own detections, none of the other's re-placed on it."""
    service = _service(forward_endpoint=f"127.0.0.1:{sink.port}")
    try:
        requests = _requests("codex-0.171.0-loop.jsonl")
        other = [ExportLogsServiceRequest.FromString(r.SerializeToString().replace(
            b"01a23128-9b8f-7d63-91ab-f96e27715538", b"01a23128-0000-0000-0000-000000000002")) for r in requests]
        _send(service.port, requests + other)
        events = [r for r in sink.records() if r.event_name == "progress.no_progress"]
        by_run = sorted(_attrs(e)["conversation.id"]["stringValue"] for e in events)
        assert by_run == ["01a23128-0000-0000-0000-000000000002"] * 2 + ["01a23128-9b8f-7d63-91ab-f96e27715538"] * 2
    finally:
        service.stop(grace=0.5)
