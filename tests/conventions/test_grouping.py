"""Runs without an agent span: root tool calls are grouped by the conversation they name,
never by the process, the host or the connection that carries them.

The spans are those of OpenLLMetry's MCP client instrumentation (each ``call_tool`` a root
span ``{tool}.tool`` of its own trace), made by a long-lived client process that serves
many sessions at once, on threads, under the real SDK with the progress processor; the
same spans are then exported to the service (OTLP protobuf, in batches mixing sessions, as
a BatchSpanProcessor sends them) and written for ``otel-progress scan`` (OTLP/JSON). An
application names a session's conversation by putting ``gen_ai.conversation.id`` in the
baggage, and OpenTelemetry's ``BaggageSpanProcessor`` copies it onto every span."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from otel_progress import Config, ProgressEngine
from otel_progress.conventions import group_key
from otel_progress.scan import scan_paths
from otel_progress.service.detector import BatchDetector

from .helpers import record

RESOURCE = {"service.name": "support-chat", "service.instance.id": "pod-7f3c", "host.name": "node-1",
            "process.pid": 4242}


def test_key_is_the_conversation_and_nothing_else() -> None:
    assert group_key(record("t", {"gen_ai.conversation.id": "c1", "session.id": "s1"}, resource=RESOURCE)) \
        == "group:gen_ai.conversation.id=c1"
    assert group_key(record("t", {"session.id": "x"}, resource=RESOURCE)) == "group:session.id=x"
    # a process, a host, a connection (an MCP transport session) never groups
    assert group_key(record("t", {}, resource=RESOURCE)) is None
    assert group_key(record("t", {"mcp.session.id": "4f1c"}, resource=RESOURCE)) is None
    assert group_key(record("t", {"gen_ai.conversation.id": "c1"}, parent="ab" * 8)) is None  # under a parent
    assert group_key(record("t", {"gen_ai.conversation.id": ["not", "text"]}, resource=RESOURCE)) is None


def _call(tracer: Any, query: str, result: str, extra: dict[str, Any]) -> None:
    with tracer.start_as_current_span("search_docs.tool", attributes={
            "traceloop.span.kind": "tool", "traceloop.entity.name": "search_docs",
            "traceloop.entity.input": json.dumps({"tool_name": "search_docs", "arguments": {"query": query}}),
            "traceloop.entity.output": json.dumps({"result": result}), **extra}):
        pass


def _session(tracer: Any, name: str, calls: list[tuple[str, str]], how: str, start: threading.Barrier) -> None:
    from opentelemetry import baggage, context

    extra: dict[str, Any] = {"mcp.session.id": f"mcp-{name}"} if how == "mcp" else {}
    token = context.attach(baggage.set_baggage("gen_ai.conversation.id", name)) if how == "baggage" else None
    try:
        start.wait(10)
        for query, result in calls:
            _call(tracer, query, result, extra)
    finally:
        if token is not None:
            context.detach(token)


def _healthy(n: int) -> list[tuple[str, str]]:
    """A healthy session: the common first question, then questions of its own."""
    return [("refund policy", "Refunds within 30 days."), *((f"order {n}-{i}", f"order {n}-{i}: shipped {i}")
                                                            for i in range(3))]


LOOP = [("refund policy", "Refunds within 30 days.")] * 6


def _client_process(sessions: dict[str, list[tuple[str, str]]], how: str) -> tuple[list[Any], list[Any]]:
    """One client process serving every session at once (a thread each); what its
    processor detected, and the spans it exported."""
    from opentelemetry.processor.baggage import ALLOW_ALL_BAGGAGE_KEYS, BaggageSpanProcessor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_progress import ProgressSpanProcessor

    exporter = InMemorySpanExporter()
    found: list[Any] = []
    provider = TracerProvider(resource=Resource.create(RESOURCE), shutdown_on_exit=False)
    provider.add_span_processor(BaggageSpanProcessor(ALLOW_ALL_BAGGAGE_KEYS))
    provider.add_span_processor(ProgressSpanProcessor(SimpleSpanProcessor(exporter), config=Config(),
                                                      on_detection=found.append, analysis="inline"))
    tracer = provider.get_tracer("opentelemetry.instrumentation.mcp")
    start = threading.Barrier(len(sessions))
    threads = [threading.Thread(target=_session, args=(tracer, name, calls, how, start))
               for name, calls in sessions.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    provider.shutdown()
    return found, list(exporter.get_finished_spans())


def _service(spans: list[Any]) -> list[Any]:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    detector = BatchDetector(ProgressEngine(Config()))
    found: list[Any] = []
    ordered = sorted(spans, key=lambda s: s.end_time)
    for i in range(0, len(ordered), 8):  # batches mixing the sessions, as a BatchSpanProcessor sends them
        found += detector.process(encode_spans(ordered[i:i + 8]).SerializeToString()).new_detections
    return found + detector.maintain(now=1e12)


def _scan(spans: list[Any], tmp: Path) -> list[Any]:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    path = tmp / "client.jsonl"
    path.write_text("".join(json.dumps(json_format.MessageToDict(encode_spans([s]))) + "\n" for s in spans))
    return scan_paths([str(path)]).detections


def _session_of(spans: list[Any]) -> dict[str, str]:
    return {format(s.context.span_id, "016x"): (s.attributes or {}).get("gen_ai.conversation.id", "") for s in spans}


@pytest.mark.parametrize("how", ["baggage", "none", "mcp"])
def test_four_sessions_asking_the_same_once_are_not_merged(tmp_path: Path, how: str) -> None:
    """The issue's case: four independent sessions of one client process, each calling
    ``search_docs("refund policy")`` once: four runs of one call, nothing to report."""
    sessions = {f"conv-{n}": [("refund policy", "Refunds within 30 days.")] for n in range(4)}
    found, spans = _client_process(sessions, how)
    assert len(spans) == 4 and len({s.context.trace_id for s in spans}) == 4
    assert found == [] and _service(spans) == [] and _scan(spans, tmp_path) == []


def test_many_concurrent_healthy_sessions_stay_quiet_and_the_looping_one_is_caught(tmp_path: Path) -> None:
    sessions = {f"conv-{n}": _healthy(n) for n in range(24)}
    sessions["conv-loop"] = LOOP
    found, spans = _client_process(sessions, "baggage")
    of = _session_of(spans)
    assert set(of.values()) == set(sessions)  # every span names its conversation
    for driver, dets in (("processor", found), ("service", _service(spans)), ("scan", _scan(spans, tmp_path))):
        assert dets, driver
        assert {of[d.span_id] for d in dets} == {"conv-loop"}, driver
        assert min(d.turn for d in dets) == 2 and dets[0].reason.value == "repeat_cycle", driver


@pytest.mark.parametrize("how", ["none", "mcp"])
def test_without_a_conversation_id_each_call_is_a_run_of_its_own(tmp_path: Path, how: str) -> None:
    """No conversation named (an MCP client on the stateless 2026-07-28 revision, or one
    that names only its transport session): nothing is merged, so the looping session is
    not caught either; doctor says which attribute makes grouping exact."""
    sessions = {f"conv-{n}": _healthy(n) for n in range(8)}
    sessions["conv-loop"] = LOOP
    found, spans = _client_process(sessions, how)
    assert found == [] and _service(spans) == [] and _scan(spans, tmp_path) == []
