"""A recorded AI SDK 5 loop run (``data/ai-sdk-5-loop-start-ties.jsonl``, what the
Collector's file exporter wrote for ``ai_sdk_5/experimental-telemetry/loop``) on which
``otel-progress scan`` and ``serve`` used to disagree: the OpenTelemetry JS SDK stamps span
starts with ``Date.now()``, seven of its eight tool calls start in the millisecond of a
model call, and such ties were broken by span id (FINDINGS.md, *Start times*). Both now
replay it in causal order (the call ids: ``otel_progress/runs/causal.py``): one step per
model call, the loop caught at the same turns on the same spans. Deterministic: the same
spans, sent once through the real Collector to serve, and scanned."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from otel_progress.conventions.spans import classify
from otel_progress.runs.replay import MODEL_START, TOOL_START, in_replay_order

from .pipeline import Pipeline, requests_of, spans_of
from .runs import detection_events, is_tool_span, scan_json

DATA = Path(__file__).with_name("data") / "ai-sdk-5-loop-start-ties.jsonl"


def _service() -> str:
    doc = json.loads(DATA.read_text().splitlines()[0])
    attrs = doc["resourceSpans"][0]["resource"]["attributes"]
    return next(a["value"]["stringValue"] for a in attrs if a["key"] == "service.name")


def _scan() -> set[tuple[str, str]]:
    code, detections, stderr = scan_json(DATA)
    assert code == 1, stderr
    return {(d["span_id"], d["reason"]) for d in detections}


def test_the_recording_has_start_ties_and_scan_catches_the_loop() -> None:
    spans = spans_of(requests_of(DATA, _service()))
    tools = [s for s in spans if is_tool_span(s)]
    models = {s.start_ns // 1_000_000 for s in spans if s.attributes.get("ai.operationId", "").endswith("doGenerate")}
    assert len(tools) == 8 and sum(s.start_ns // 1_000_000 in models for s in tools) == 7
    assert {r for _, r in _scan()} == {"repeat_cycle"}


def test_the_recording_is_replayed_one_step_per_model_call() -> None:
    # in causal order every tool call follows the model call that requested it, however
    # the span ids fall: M1 T1 M2 T2 ... and the final answer's model call last
    spans = spans_of(requests_of(DATA, _service()))
    order = [o[4] for o in in_replay_order([(s, classify(s)) for s in spans]) if o[3] in (MODEL_START, TOOL_START)]
    names = ["tool" if is_tool_span(s) else "model" for s in order]
    assert names == ["model", "tool"] * 8 + ["model"]
    for model, tool in zip(order[0::2], order[1::2], strict=False):
        assert tool.attributes["ai.toolCall.id"] in model.attributes["ai.response.toolCalls"]


@pytest.mark.timeout(600)
def test_serve_and_scan_agree_on_a_run_with_start_ties(pipeline: Pipeline) -> None:
    for line in DATA.read_text().splitlines():
        request = urllib.request.Request(f"{pipeline.otlp_http}/v1/traces", data=line.encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as resp:
            assert resp.status == 200
    exported = pipeline.collect(_service())
    served = {(s.span_id, str(a.get("progress.reason"))) for s in exported.annotated if is_tool_span(s)
              for a in detection_events(s)}
    assert served, pipeline.logs()
    assert served == _scan()
