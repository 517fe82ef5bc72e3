"""Other detectors' verdicts on spans (otel_progress.conventions.verdicts) and how a detection of
ours carries one (otel_progress.model.verdicts, otel_progress.runs.verdicts), on the shapes their
code writes: Pydantic AI Harness's ``_emit_event`` (``loop_detection.detected`` with
``loop.tier``, ``loop.tool_name``, ``loop.count``, ``loop.window``) and the GenAI
``gen_ai.evaluation.result`` event (ours included, which must never count as another's)."""

from __future__ import annotations

from typing import Any

import pytest

from otel_progress.conventions.record import SpanRecord
from otel_progress.conventions.verdicts import HARNESS_EVENT, evaluation_verdict, read_span_verdicts
from otel_progress.model import Detection, Level, Reason, Scope
from otel_progress.model.evaluation import evaluation_event
from otel_progress.model.verdicts import PYDANTIC_AI_HARNESS, Verdict, corroborated, corroborates
from otel_progress.runs.verdicts import MAX_PER_RUN, MAX_RUNS, VerdictBook

TRACE, RUN = "ab" * 16, "cd" * 8


def _span(*events: tuple[str, Any]) -> SpanRecord:
    return SpanRecord(TRACE, "ef" * 8, RUN, "running tool search", 10, 20, {}, events=events)


def _harness(**extra: Any) -> tuple[str, dict[str, Any]]:
    # pydantic_ai_harness/loop_detection/_capability.py, _emit_event
    attrs = {"loop.tier": "error_cycle", "loop.tool_name": "search", "loop.count": 3, "loop.window": 3, **extra}
    return (HARNESS_EVENT, attrs)


def _detection(turn: int, trace: str = TRACE, run: str = RUN) -> Detection:
    return Detection(Reason.REPEAT_CYCLE, turn, Level.NUDGE, Scope.AGENT, trace, "01" * 8, run, "a", "search",
                     {"period": 1}, "", "")


def test_the_harness_event_is_a_verdict_with_its_tier_tool_and_count() -> None:
    [verdict] = read_span_verdicts(_span(_harness()))
    assert verdict.source == PYDANTIC_AI_HARNESS and verdict.kind == "error_cycle"
    assert verdict.tool == "search" and verdict.count == 3
    assert verdict.span_id == "ef" * 8 and verdict.time_ns == 20  # the span's end: no event times kept
    # a monologue names no tool (the harness writes "")
    [monologue] = read_span_verdicts(_span(_harness(**{"loop.tier": "monologue", "loop.tool_name": ""})))
    assert monologue.tool is None and monologue.kind == "monologue"


def test_another_evaluators_loop_result_is_a_verdict_and_ours_never_is() -> None:
    theirs = {"gen_ai.evaluation.name": "agent_loop", "gen_ai.evaluation.score.label": "looping",
              "gen_ai.evaluation.score.value": 0.9, "gen_ai.evaluation.explanation": "the same search again"}
    verdict = evaluation_verdict(theirs)
    assert verdict is not None and verdict.source == "gen_ai.evaluation.result:agent_loop"
    assert verdict.kind == "looping"
    # an evaluator of something else is no loop check
    assert evaluation_verdict({"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.label": "relevant"}) \
        is None
    # ours: the record otel-progress itself writes (docs/telemetry.md)
    ours = evaluation_event(_detection(4)).attributes
    assert ours["gen_ai.evaluation.name"].startswith("progress.")
    assert evaluation_verdict(ours) is None
    assert evaluation_verdict({**theirs, "progress.event": "no_progress"}) is None
    spans = read_span_verdicts(_span(("gen_ai.evaluation.result", theirs), ("gen_ai.evaluation.result", ours)))
    assert [v.source for v in spans] == ["gen_ai.evaluation.result:agent_loop"]


@pytest.mark.parametrize("events", [
    (("loop_detection.detected", None),), (("loop_detection.detected", {"loop.tier": 3, "loop.count": "x"}),),
    (("gen_ai.evaluation.result", {"gen_ai.evaluation.name": ["loop"]}),), ("not a pair",), ((1, 2, 3),),
    (("loop_detection.detected", {"loop.count": float("nan"), "loop.tool_name": b"\xff"}),),
])
def test_odd_events_never_raise(events: tuple[Any, ...]) -> None:
    for verdict in read_span_verdicts(_span(*events)):
        assert verdict.source == PYDANTIC_AI_HARNESS


def test_a_detection_carries_a_verdict_of_its_run_within_the_window() -> None:
    verdict = Verdict(PYDANTIC_AI_HARNESS, "exact_repetition", TRACE, RUN, turn=5)
    assert corroborates(verdict, _detection(5), 10) and corroborates(verdict, _detection(15), 10)
    assert not corroborates(verdict, _detection(16), 10)  # an earlier stretch of the run
    assert not corroborates(verdict, _detection(6, run="other"), 10)
    carried = corroborated(_detection(6), verdict).event_attributes()
    assert carried["progress.corroborated_by"] == PYDANTIC_AI_HARNESS
    assert carried["progress.corroborating_kind"] == "exact_repetition"
    assert carried["progress.corroborating_turn"] == 5


def test_the_book_is_bounded_and_keeps_the_latest() -> None:
    book = VerdictBook(window=10)
    for n in range(MAX_PER_RUN + 3):
        book.add(Verdict(PYDANTIC_AI_HARNESS, f"k{n}", TRACE, RUN), n)
    kept = book.verdicts(TRACE, RUN)
    assert len(kept) == MAX_PER_RUN and kept[-1].kind == f"k{MAX_PER_RUN + 2}"
    assert book.corroborate(_detection(MAX_PER_RUN + 2)).figures["corroborating_kind"] == f"k{MAX_PER_RUN + 2}"
    for n in range(MAX_RUNS + 5):
        book.add(Verdict(PYDANTIC_AI_HARNESS, "x", TRACE, f"run-{n}"), 1)
    assert len(book) == MAX_RUNS and book.verdicts(TRACE, RUN) == []
    # a detection already carrying one is left as it is
    once = book.corroborate(_detection(1, run=f"run-{MAX_RUNS + 4}"))
    assert book.corroborate(once) is once
