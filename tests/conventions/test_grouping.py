"""Runs without an agent span: root tool calls grouped by what they share, through the key
itself, ``otel-progress scan`` and the in-process processor.

The scan case is OpenLLMetry's MCP client (``opentelemetry-instrumentation-mcp``: each
``call_tool`` a root span ``{tool}.tool`` of its own trace)."""

from __future__ import annotations

import json
from pathlib import Path

from otel_progress.conventions import group_key
from otel_progress.scan import scan_paths

from .helpers import record
from .otlp import T0, S, root_span_request, write


def test_key_precedence() -> None:
    res = {"service.name": "c", "service.instance.id": "inst-1", "host.name": "h", "process.pid": 42}
    assert group_key(record("t", {"mcp.session.id": "s1", "gen_ai.conversation.id": "c1"}, resource=res)) \
        == "group:mcp.session.id=s1"
    assert group_key(record("t", {"gen_ai.conversation.id": "c1"}, resource=res)) == "group:gen_ai.conversation.id=c1"
    assert group_key(record("t", {"session.id": "x"}, resource=res)) == "group:session.id=x"
    assert group_key(record("t", {}, resource=res)) == "group:service.instance.id=inst-1"
    assert group_key(record("t", {}, resource={"service.name": "c", "host.name": "h", "process.pid": 42})) \
        == "group:process=c@h#42"
    assert group_key(record("t", {}, resource={"service.name": "c"})) is None
    assert group_key(record("t", {"mcp.session.id": "s1"}, parent="ab" * 8)) is None
    odd = record("t", {"mcp.session.id": ["not", "text"]}, resource=res)
    assert group_key(odd) == "group:service.instance.id=inst-1"


def _mcp_call(i: int, instance: str, query: str = "x", result: str = "0 results") -> dict:
    return root_span_request(f"{instance}-{i}", "search.tool", {
        "traceloop.span.kind": "tool", "traceloop.entity.name": "search",
        "traceloop.entity.input": json.dumps({"tool_name": "search", "arguments": {"q": query}}),
        "traceloop.entity.output": json.dumps({"result": result})},
        {"service.name": "mcp-client", "service.instance.id": instance}, T0 + i * S)


def test_scan_groups_one_clients_root_tool_calls(tmp_path: Path) -> None:
    requests = [_mcp_call(i, "client-a") for i in range(5)]
    trace_ids = {r["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] for r in requests}
    result = scan_paths([str(write(tmp_path / "a.jsonl", requests))])
    assert result.detections, "five identical calls of one client are one run"
    assert all(d.trace_id in trace_ids for d in result.detections)  # the real trace, not the group key
    groups = [rep for rep in result.reports if rep.trace_id == "group:service.instance.id=client-a"]
    assert groups and groups[0].runs[0].turns == 5


def test_scan_keeps_different_clients_apart(tmp_path: Path) -> None:
    requests = [_mcp_call(i, f"client-{i}") for i in range(5)]
    assert scan_paths([str(write(tmp_path / "b.jsonl", requests))]).detections == []


def test_scan_healthy_client_is_left_alone(tmp_path: Path) -> None:
    requests = [_mcp_call(i, "client-a", query=f"q{i}", result=f"doc-{i}: text {i}") for i in range(5)]
    result = scan_paths([str(write(tmp_path / "c.jsonl", requests))])
    assert result.detections == []
    assert [r.turns for rep in result.reports for r in rep.runs] == [5]


def _run_client(instance: str, queries: list[str], results: list[str], analysis: str) -> tuple[list, list]:
    """An MCP-client-like program under the real SDK: each tool call a root span of its own
    trace (OpenLLMetry's MCP shape), the progress processor wrapping an in-memory export."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_progress.config import Config
    from otel_progress.processor import ProgressSpanProcessor

    exporter = InMemorySpanExporter()
    seen: list = []
    provider = TracerProvider(resource=Resource.create({"service.name": "mcp-client", "service.instance.id": instance}),
                              shutdown_on_exit=False)
    provider.add_span_processor(ProgressSpanProcessor(SimpleSpanProcessor(exporter), config=Config(),
                                                      on_detection=seen.append, analysis=analysis))
    tracer = provider.get_tracer("test")
    for query, result in zip(queries, results, strict=True):
        with tracer.start_as_current_span("search.tool", attributes={
                "traceloop.span.kind": "tool", "traceloop.entity.name": "search",
                "traceloop.entity.input": json.dumps({"tool_name": "search", "arguments": {"q": query}}),
                "traceloop.entity.output": json.dumps({"result": result})}):
            pass
    provider.force_flush()
    provider.shutdown()
    return seen, exporter.get_finished_spans()


def test_processor_groups_one_clients_root_tool_calls() -> None:
    for analysis in ("inline", "background"):
        seen, spans = _run_client("client-a", ["x"] * 5, ["0 results"] * 5, analysis)
        assert seen, analysis
        traces = {format(s.context.trace_id, "032x") for s in spans}
        assert len(traces) == 5  # every call its own trace
        assert all(d.trace_id in traces for d in seen)
        annotated = [s for s in spans if (s.attributes or {}).get("progress.detected")]
        assert annotated and {format(s.context.span_id, "016x") for s in annotated} <= {d.span_id for d in seen}


def test_processor_healthy_client_left_alone() -> None:
    seen, _ = _run_client("client-b", [f"q{i}" for i in range(5)], [f"doc-{i}: text {i}" for i in range(5)], "inline")
    assert seen == []


def _proto_request(instance: str, calls: list[tuple[int, str, str]]) -> bytes:
    """An OTLP protobuf request with one root MCP-client tool span per trace."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    def kv(key: str, value: str) -> common_pb2.KeyValue:
        return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=value))

    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend([kv("service.name", "mcp-client"), kv("service.instance.id", instance)])
    ss = rs.scope_spans.add()
    for n, query, result in calls:
        ss.spans.append(trace_pb2.Span(
            trace_id=n.to_bytes(16, "big"), span_id=(n + 1000).to_bytes(8, "big"), name="search.tool",
            start_time_unix_nano=T0 + n * S, end_time_unix_nano=T0 + n * S + S // 10,
            attributes=[kv("traceloop.span.kind", "tool"), kv("traceloop.entity.name", "search"),
                        kv("traceloop.entity.input", json.dumps({"tool_name": "search", "arguments": {"q": query}})),
                        kv("traceloop.entity.output", json.dumps({"result": result}))]))
    return req.SerializeToString()


def test_service_groups_one_clients_root_tool_calls_across_requests() -> None:
    from otel_progress.config import Config
    from otel_progress.engine import ProgressEngine
    from otel_progress.service.detector import BatchDetector

    detector = BatchDetector(ProgressEngine(Config()))
    found = []
    for n in range(1, 6):  # one request per call, as a client's exporter may send them
        found += detector.process(_proto_request("client-a", [(n, "x", "0 results")])).new_detections
    assert found and all(int(d.trace_id, 16) in range(1, 6) for d in found)

    other = BatchDetector(ProgressEngine(Config()))
    apart = [d for n in range(1, 6)
             for d in other.process(_proto_request(f"client-{n}", [(n, "x", "0 results")])).new_detections]
    assert apart == []
