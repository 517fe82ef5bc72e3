"""Other detectors' verdicts in the processor (a real SDK TracerProvider): a loop check of the
application's that writes ``loop_detection.detected`` on the current span, as Pydantic AI
Harness's ``LoopDetection._emit_event`` does (``trace.get_current_span().add_event``; from
``after_tool_execute`` the tool's span), is read when that span ends: the detections of ours
made after it carry it (``progress.corroborated_by``), and nothing is written for it."""

from __future__ import annotations

import json

from opentelemetry import trace

from otel_progress import Config
from otel_progress.model.verdicts import PYDANTIC_AI_HARNESS

from .conftest import make_rig, progress_events


def _tool_with_verdict(agent, tracer, n: int, *, verdict: bool) -> None:  # type: ignore[no-untyped-def]
    span = tracer.start_span("execute_tool search", start_time=agent.now,
                             attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"})
    agent.advance(1.0)
    span.set_attribute("gen_ai.tool.call.arguments", json.dumps({"q": "refund policy"}))
    span.set_attribute("gen_ai.tool.call.result", json.dumps({"results": [], "total": 0}))
    if verdict:
        with trace.use_span(span, end_on_exit=False):  # the harness writes on the current span
            trace.get_current_span().add_event("loop_detection.detected", {
                "loop.tier": "error_cycle", "loop.tool_name": "search", "loop.count": n, "loop.window": n})
    span.end(end_time=agent.now)


def test_our_detections_after_the_harness_verdict_carry_it() -> None:
    for analysis in ("inline", "background"):
        rig = make_rig(Config(), analysis=analysis)
        try:
            agent = rig.agent()
            tracer = rig.provider.get_tracer("tests")
            with agent.agent("docs-agent"):
                for turn in range(1, 7):
                    agent.chat(1000, 50)
                    _tool_with_verdict(agent, tracer, turn, verdict=turn == 3)
            spans = rig.spans()
            found = [(d.reason.value, d.turn, d.figures.get("corroborated_by")) for d in rig.detections]
            assert found == [("repeat_cycle", 2, None), ("repeat_cycle", 4, PYDANTIC_AI_HARNESS),
                             ("repeat_cycle", 6, PYDANTIC_AI_HARNESS)], analysis
            events = [attrs for s in spans for _, attrs in progress_events(s)]
            carried = [e for e in events if e.get("progress.corroborated_by") == PYDANTIC_AI_HARNESS]
            assert carried and all(e["progress.corroborating_kind"] == "error_cycle" for e in carried)
            # nothing of ours for the verdict itself: its span keeps only the harness's event
            [verdict_span] = [s for s in spans if any(e.name == "loop_detection.detected" for e in s.events)]
            assert [e.name for e in verdict_span.events if e.name in ("no_progress", "livelock")] == []
        finally:
            rig.provider.shutdown()
