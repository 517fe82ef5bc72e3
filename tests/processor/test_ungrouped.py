"""A set-up that cannot form runs says so (issue 27, item 5): tool spans that are each the
root of a trace of their own and name no conversation (a bare MCP client) are never
grouped, so the processor warns once per service, naming what to add, and counts them in
``progress.setup.ungrouped_spans``. The same calls under an ``invoke_agent`` span, or
naming ``gen_ai.conversation.id``, or a single such call, or calls too far apart, are no
set-up problem: no warning, nothing counted. Real SDK, real MeterProvider."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_progress import Config, ProgressSpanProcessor

METRIC = "progress.setup.ungrouped_spans"
T0 = 1_700_000_000_000_000_000


@dataclass
class Client:
    provider: TracerProvider
    processor: ProgressSpanProcessor
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def counted(self) -> dict[str, int]:
        self.processor.force_flush()
        out: dict[str, int] = {}
        data = self.reader.get_metrics_data()
        for rm in data.resource_metrics if data is not None else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == METRIC:
                        for point in metric.data.data_points:
                            out[str(point.attributes["service.name"])] = point.value
        return out


@pytest.fixture(params=["inline", "background"])
def client(request: pytest.FixtureRequest) -> Iterator[Client]:
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    provider = TracerProvider(resource=Resource.create({"service.name": "mcp-client"}), shutdown_on_exit=False)
    processor = ProgressSpanProcessor(SimpleSpanProcessor(exporter), config=Config(), analysis=request.param,
                                      meter_provider=MeterProvider(metric_readers=[reader]))
    provider.add_span_processor(processor)
    yield Client(provider, processor, exporter, reader)
    provider.shutdown()


def _calls(c: Client, n: int, *, agent: bool = False, conversation: str | None = None,
           every_s: float = 2.0) -> None:
    """``n`` MCP tool calls (OpenLLMetry's MCP instrumentation), each its own trace unless
    ``agent`` puts them under one invoke_agent span; ``every_s`` seconds apart."""
    tracer = c.provider.get_tracer("opentelemetry.instrumentation.mcp")
    attrs: dict[str, Any] = {
        "traceloop.span.kind": "tool", "traceloop.entity.name": "search_docs",
        "traceloop.entity.input": json.dumps({"tool_name": "search_docs", "arguments": {"q": "same"}}),
        "traceloop.entity.output": json.dumps({"result": "no match"})}
    if conversation:
        attrs["gen_ai.conversation.id"] = conversation
    outer = (tracer.start_as_current_span("invoke_agent helper", start_time=T0, attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"}) if agent else nullcontext())
    with outer:
        for i in range(n):
            start = T0 + int(i * every_s * 1e9) + 1
            span = tracer.start_span("search_docs.tool", attributes=attrs, start_time=start)
            span.end(end_time=start + 1_000_000)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "otel_progress" and "name no conversation" in r.getMessage()]


def test_a_bare_client_is_warned_about_once_and_counted(client: Client, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_progress"):
        _calls(client, 5)
        assert client.counted() == {"mcp-client": 5}
        _calls(client, 2)
        assert client.counted() == {"mcp-client": 7}
    (record,) = _warnings(caplog)
    assert record.levelno == logging.WARNING
    text = record.getMessage()
    assert "'mcp-client'" in text and "gen_ai.conversation.id" in text and "invoke_agent" in text, text
    assert METRIC in text and "Traceback" not in caplog.text


@pytest.mark.parametrize("how", ["agent", "conversation", "single", "far_apart"])
def test_a_set_up_that_forms_runs_is_not_warned_about(client: Client, caplog: pytest.LogCaptureFixture,
                                                      how: str) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_progress"):
        if how == "agent":
            _calls(client, 6, agent=True)
        elif how == "conversation":
            _calls(client, 6, conversation="support-1")
        elif how == "single":
            _calls(client, 1)
        else:  # three calls, but never three within five minutes
            _calls(client, 3, every_s=200.0)
        assert client.counted() == {}
    assert not _warnings(caplog)
    if how in ("agent", "conversation"):  # and the loop is caught, as it should be
        client.processor.force_flush()
        assert any(e.name == "no_progress" for s in client.exporter.get_finished_spans() for e in s.events)
