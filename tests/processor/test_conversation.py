"""The conversation scope through the three adapters, on spans of the real SDK: a chat
agent (one trace per turn, ``gen_ai.conversation.id`` on every span) doing the same
lookups with the same answers turn after turn is caught once, on the agent span of its
fourth turn, in process, by serve's detector and by scan; a healthy chat stays quiet.
(Across replicas behind the gateway: tests/collector/test_collector_conversation.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from otel_progress import Config, ProgressEngine
from otel_progress.model import Scope
from otel_progress.scan import scan_paths
from otel_progress.service.detector import BatchDetector
from tests.chat_agent import chat_turns

from .conftest import make_rig, progress_events


def _chat(healthy: bool, turns: int = 4) -> tuple[list[Any], list[Any], list[str]]:
    """The turns in process: the detections and the annotated spans."""
    r = make_rig()
    traces = chat_turns(r.provider.get_tracer("tests"), "conv-1", turns, healthy=healthy)
    spans = r.spans()
    r.provider.shutdown()
    return r.detections, spans, traces


def _conversation(dets: list[Any]) -> list[Any]:
    return [d for d in dets if d.scope is Scope.CONVERSATION]


def test_in_process_the_looping_chat_is_caught_on_its_fourth_turns_agent_span() -> None:
    dets, spans, traces = _chat(healthy=False)
    (det,) = _conversation(dets)
    assert det.turn == 4 and det.trace_id == traces[3] and det.reason.value == "signature_repeat"
    agent = next(s for s in spans if format(s.context.span_id, "016x") == det.span_id)
    assert agent.name == "invoke_agent support"
    ((event, attrs),) = progress_events(agent)
    assert event == "livelock" and attrs["progress.scope"] == "conversation"
    assert attrs["progress.conversation_id"] == "conv-1" and attrs["progress.visits"] == 3


def test_in_process_a_healthy_chat_stays_quiet() -> None:
    dets, _spans, _traces = _chat(healthy=True, turns=8)
    assert dets == []


def _serve(spans: list[Any]) -> list[Any]:
    detector = BatchDetector(ProgressEngine(Config()), merge_window=0.0)
    found: list[Any] = []
    for trace_id in dict.fromkeys(s.context.trace_id for s in spans):  # a batch per turn, as they end
        turn = [s for s in spans if s.context.trace_id == trace_id]
        found += detector.process(encode_spans(turn).SerializeToString()).new_detections
    return found + detector.maintain(now=1e12)


def _scan(spans: list[Any], tmp: Path) -> list[Any]:
    path = tmp / "chat.jsonl"
    path.write_text("".join(json.dumps(json_format.MessageToDict(encode_spans([s]))) + "\n" for s in spans))
    return scan_paths([str(path)]).detections


@pytest.mark.parametrize("adapter", ["serve", "scan"])
def test_serve_and_scan_catch_the_loop_once_and_leave_the_healthy_chat_quiet(adapter: str, tmp_path: Path) -> None:
    r = make_rig(wrap=False)
    tracer = r.provider.get_tracer("tests")
    looping = chat_turns(tracer, "conv-loop", 4)
    chat_turns(tracer, "conv-ok", 8, healthy=True)
    spans = list(r.exporter.get_finished_spans())
    r.provider.shutdown()
    found = _serve(spans) if adapter == "serve" else _scan(spans, tmp_path)
    assert [(d.trace_id, d.turn, d.figures["conversation_id"]) for d in _conversation(found)] == [
        (looping[3], 4, "conv-loop")]
    assert not [d for d in found if d.scope is not Scope.CONVERSATION]
