"""A grouped run (root tool calls of one conversation, no agent span: docs/runs.md) ends
like any run, summarised: in process when it is idle for ``run_ttl_seconds`` or when the
processor shuts down (an explicit end), in the service when its state goes idle. Either
way its wasted turns are counted."""

from __future__ import annotations

import json
from typing import Any

from otel_progress import Config, ProgressEngine
from otel_progress.service.detector import BatchDetector

from .conftest import make_rig


def _calls(tracer: Any, n: int, conversation: str = "conv-1") -> None:
    for _ in range(n):
        with tracer.start_as_current_span("search_docs.tool", attributes={
                "traceloop.span.kind": "tool", "traceloop.entity.name": "search_docs",
                "traceloop.entity.input": json.dumps({"tool_name": "search_docs", "arguments": {"q": "same"}}),
                "traceloop.entity.output": json.dumps({"result": "no match"}),
                "gen_ai.conversation.id": conversation}):
            pass


def test_a_grouped_run_ends_at_shutdown_with_its_wasted_turns() -> None:
    r = make_rig()
    _calls(r.provider.get_tracer("opentelemetry.instrumentation.mcp"), 6)
    assert r.detections and r.detections[0].turn == 2
    assert "progress.wasted.turns" not in r.metrics()  # the run is still open
    r.provider.shutdown()
    assert sum(v for _, v in r.metrics()["progress.wasted.turns"]) == 4
    assert r.processor.engine.active_runs == 0


def test_a_grouped_run_idle_for_the_run_ttl_ends() -> None:
    r = make_rig(Config(run_ttl_seconds=0.01))
    tracer = r.provider.get_tracer("opentelemetry.instrumentation.mcp")
    _calls(tracer, 6, "conv-1")
    import time

    time.sleep(1.1)  # past the TTL and the tracker's once-a-second look
    _calls(tracer, 1, "conv-2")  # any later call lets the tracker look
    assert sum(v for _, v in r.metrics()["progress.wasted.turns"]) == 4
    r.provider.shutdown()


def test_the_service_ends_an_idle_grouped_run_with_its_wasted_turns() -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    r = make_rig(wrap=True)
    _calls(r.provider.get_tracer("opentelemetry.instrumentation.mcp"), 6)
    spans = r.spans()
    r.provider.shutdown()
    detector = BatchDetector(ProgressEngine(Config()))
    found = [d for s in spans for d in detector.process(encode_spans([s]).SerializeToString()).new_detections]
    assert found and found[0].turn == 2
    assert detector.metrics.value("progress.service.wasted.turns") == 0
    detector.maintain(now=1e12)
    assert detector.metrics.value("progress.service.wasted.turns") == 4
