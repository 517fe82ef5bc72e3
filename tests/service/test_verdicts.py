"""Other detectors' verdicts in ``serve``'s trace path (BatchDetector) and in ``scan``
(analyse_trace): a Pydantic AI Harness ``loop_detection.detected`` event on a tool span is
kept with the run, never reported by itself, and carried by the detections of ours made
after it, the same in every batching as in scan; one written on the agent span is read when
that span ends (span records keep no event times)."""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.trace.v1 import trace_pb2

from otel_progress import Config, ProgressEngine
from otel_progress.model.verdicts import PYDANTIC_AI_HARNESS
from otel_progress.scan.analyse import analyse_trace
from otel_progress.service.detector import BatchDetector
from otel_progress.service.otlp import span_record

from .helpers import key_values, loop_trace, progressing_trace, request, sid

Found = list[tuple[str, int, Any, Any]]
_HARNESS = {"loop.tier": "error_cycle", "loop.tool_name": "search", "loop.count": 3, "loop.window": 3}


def _with_event(spans: list[trace_pb2.Span], span_n: int, name: str = "loop_detection.detected",
                attributes: dict[str, Any] | None = None) -> list[trace_pb2.Span]:
    for s in spans:
        if s.span_id == sid(span_n):
            event = s.events.add(name=name, time_unix_nano=s.end_time_unix_nano - 1)
            event.attributes.extend(key_values(attributes or _HARNESS))
    return spans


def _brief(dets: Any) -> Found:
    return [(d.reason.value, d.turn, d.figures.get("corroborated_by"), d.figures.get("corroborating_turn"))
            for d in dets]


def _scan(spans: list[trace_pb2.Span]) -> Found:
    return _brief(analyse_trace([span_record(s) for s in spans], ProgressEngine(Config())).detections)


def _serve(spans: list[trace_pb2.Span], batches: int) -> Found:
    detector = BatchDetector(ProgressEngine(Config()))
    found: Found = []
    size = -(-len(spans) // batches)
    for i in range(0, len(spans), size):
        found += _brief(detector.process(request(spans[i:i + size]).SerializeToString()).new_detections)
    return found


def test_a_harness_verdict_is_carried_by_our_later_detections_in_serve_as_in_scan() -> None:
    spans = _with_event(loop_trace(7, 6), 203)  # error_cycle on the third call's span
    expected = [("repeat_cycle", 2, None, None),  # made before the verdict was read: as it was
                ("repeat_cycle", 4, PYDANTIC_AI_HARNESS, 2), ("repeat_cycle", 6, PYDANTIC_AI_HARNESS, 2)]
    assert _scan(spans) == expected
    for batches in (1, 2, 3, 13):
        assert _serve(spans, batches) == expected, batches


def test_the_span_event_carries_the_verdict_and_none_is_written_for_the_verdict() -> None:
    spans = _with_event(loop_trace(7, 6), 203)
    result = BatchDetector(ProgressEngine(Config())).process(request(spans).SerializeToString())
    events = [d.event_attributes() for d in result.new_detections]
    # ours only (each on its span and the agent span): the harness's verdict is never re-reported
    assert len(events) == 3 and {id(p.detection) for p in result.placements} == {id(d) for d in result.new_detections}
    carried = [attrs for attrs in events if attrs.get("progress.corroborated_by")]
    assert [a["progress.corroborating_kind"] for a in carried] == ["error_cycle", "error_cycle"]


def test_without_a_loop_of_ours_a_verdict_is_never_reported() -> None:
    spans = _with_event(progressing_trace(8, 6), 204)
    assert _scan(spans) == [] and _serve(spans, 2) == []


def test_our_own_evaluation_result_is_never_a_verdict() -> None:
    ours = {"gen_ai.evaluation.name": "progress.no_progress", "gen_ai.evaluation.score.label": "repeat_cycle",
            "gen_ai.evaluation.explanation": "agent stopped making progress at turn 2: repeat_cycle",
            "progress.event": "no_progress"}
    spans = _with_event(loop_trace(7, 6), 203, "gen_ai.evaluation.result", ours)
    assert all(found[2] is None for found in _scan(spans))
    theirs = {"gen_ai.evaluation.name": "loop_judge", "gen_ai.evaluation.score.label": "loop"}
    spans = _with_event(loop_trace(7, 6), 203, "gen_ai.evaluation.result", theirs)
    assert [found[2] for found in _scan(spans)] == [None] + ["gen_ai.evaluation.result:loop_judge"] * 2


def test_a_verdict_on_the_agent_span_is_read_when_the_run_ends() -> None:
    # an event on the agent run span (a check that writes from a hook whose current span is
    # the run's) is read at the run's end, after the detections made during the run, which
    # stay as they were
    spans = _with_event(loop_trace(7, 6), 1, attributes={**_HARNESS, "loop.tier": "exact_repetition"})
    assert _scan(spans) == [("repeat_cycle", 2, None, None), ("repeat_cycle", 4, None, None),
                            ("repeat_cycle", 6, None, None)]


def test_a_verdict_on_a_model_span_is_read_at_its_place_in_the_run() -> None:
    # pydantic-ai's after_model_request runs under the model request's chat span: the
    # harness's exact_repetition event lands there (tests/frameworks/test_loop_verdicts.py)
    spans = _with_event(loop_trace(7, 6), 105, attributes={**_HARNESS, "loop.tier": "exact_repetition",
                                                           "loop.count": 5})
    expected = [("repeat_cycle", 2, None, None), ("repeat_cycle", 4, None, None),
                ("repeat_cycle", 6, PYDANTIC_AI_HARNESS, 4)]
    assert _scan(spans) == expected
    for batches in (1, 2, 13):
        assert _serve(spans, batches) == expected, batches
