"""Item 6: the same trace gives the same detections in the service and in the in-process
processor. One single-agent trace (deterministic span ids) is produced twice by the same
code with the OpenTelemetry SDK: once through ``ProgressSpanProcessor``, once exported over
OTLP/gRPC in small batches (the trace crosses batch boundaries) to ``otel-progress serve``
on loopback. Both must put the same events (name, reason, turn, level) on the same spans:
the looping tool spans and the run's ``invoke_agent`` span."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from otel_progress import Config

from .helpers import all_spans, attrs_of

pytestmark = pytest.mark.timeout(120)


class _Sequential(IdGenerator):
    def __init__(self) -> None:
        self._span = 0

    def generate_span_id(self) -> int:
        self._span += 1
        return 0x1000 + self._span

    def generate_trace_id(self) -> int:
        return 0xABCDEF0123456789ABCDEF0123456789


def _agent(provider: TracerProvider) -> None:
    """A single agent: three turns of progress, then the same lookup over and over, with
    a model call before each tool call and an HTTP call inside each tool call."""
    tracer = provider.get_tracer("parity.agent")
    with tracer.start_as_current_span("invoke_agent support", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"}):
        for turn in range(1, 10):
            with tracer.start_as_current_span("chat model", attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 300 + turn,
                    "gen_ai.usage.output_tokens": 25}):
                pass
            looping = turn > 3
            query = "where is order 42" if looping else f"question {turn}"
            result = {"answer": "see the FAQ"} if looping else {"answer": f"fact {turn}"}
            with tracer.start_as_current_span("execute_tool kb_search", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "kb_search",
                    "gen_ai.tool.call.arguments": json.dumps({"query": query}),
                    "gen_ai.tool.call.result": json.dumps(result)}), \
                    tracer.start_as_current_span("GET /kb", attributes={"http.request.method": "GET"}):
                pass


def _events(spans: Iterator[tuple[str, str, list[tuple[str, dict[str, Any]]]]]) -> set[tuple[Any, ...]]:
    out = set()
    for span_id, name, events in spans:
        for ev_name, attrs in events:
            if ev_name in ("no_progress", "livelock"):
                out.add((span_id, name, ev_name, attrs["progress.reason"], attrs["progress.turn"],
                         attrs["progress.level"], attrs["progress.scope"]))
    return out


def _from_sdk(spans: tuple[ReadableSpan, ...]) -> set[tuple[Any, ...]]:
    return _events((format(s.context.span_id, "016x"), s.name,
                    [(e.name, dict(e.attributes or {})) for e in s.events]) for s in spans)


def test_service_and_in_process_processor_agree(make_service, downstream):
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    from otel_progress import ProgressSpanProcessor

    # in process
    memory = InMemorySpanExporter()
    provider = TracerProvider(id_generator=_Sequential())
    provider.add_span_processor(ProgressSpanProcessor(SimpleSpanProcessor(memory), config=Config()))
    _agent(provider)
    provider.shutdown()
    in_process = _from_sdk(memory.get_finished_spans())

    # through the service: OTLP/gRPC in batches of 5 spans
    svc = make_service(forward_endpoint=downstream.endpoint)
    provider = TracerProvider(id_generator=_Sequential())
    provider.add_span_processor(BatchSpanProcessor(
        OTLPSpanExporter(endpoint=f"127.0.0.1:{svc.port}", insecure=True, timeout=10),
        max_export_batch_size=5, schedule_delay_millis=50))
    _agent(provider)
    provider.shutdown()
    got = downstream.requests()
    assert len(got) >= 3  # the trace crosses batch boundaries
    service = _events((s.span_id.hex(), s.name, [(e.name, attrs_of(e.attributes)) for e in s.events])
                      for r in got for s in all_spans(r))

    assert in_process, "the processor found nothing: the trace does not loop?"
    tools = {e for e in in_process if e[1].startswith("execute_tool")}
    assert {(e[3], e[4], e[5]) for e in tools} == {("repeat_cycle", 5, 1), ("repeat_cycle", 7, 2),
                                                     ("repeat_cycle", 9, 3)}
    assert any(e[1].startswith("invoke_agent") for e in in_process)  # also on the agent span
    assert service == in_process
