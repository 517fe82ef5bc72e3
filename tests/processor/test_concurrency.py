"""Concurrent span ends, fork safety."""

from __future__ import annotations

import os
import sys
from collections import Counter
from typing import Any

import pytest

from otel_progress import Config

from .conftest import docs_loop, in_forked_child, make_rig, progress_events, run_docs_loops_in_threads


def _expected_per_run() -> list[tuple[str, int, int]]:
    r = make_rig()
    docs_loop(r.agent(), turns=14)
    return [(d.reason.value, d.turn, int(d.level)) for d in r.detections]


def test_sixteen_threads_lose_and_duplicate_nothing() -> None:
    expected = _expected_per_run()
    assert len(expected) >= 2
    r = make_rig(Config(max_runs=10_000))
    runs_per_thread = 12
    run_docs_loops_in_threads(r, 16, runs_per_thread)
    by_agent: dict[str, list[tuple[str, int, int]]] = {}
    for det in r.detections:
        assert det.agent is not None
        by_agent.setdefault(det.agent, []).append((det.reason.value, det.turn, int(det.level)))
    assert len(by_agent) == 16 * runs_per_thread
    for agent, dets in by_agent.items():
        assert sorted(dets) == sorted(expected), agent
    # each detection is on exactly one exported tool span, once
    spans = r.by_id()
    counts = Counter(d.span_id for d in r.detections)
    assert all(c == 1 for c in counts.values())
    for det in r.detections:
        assert progress_events(spans[det.span_id]) == [(det.event, det.event_attributes())]
    assert r.processor.processor_errors == 0
    assert (r.processor.open_spans, r.processor.tracked_traces, r.processor.active_runs) == (0, 0, 0)


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs fork")
def test_state_is_reset_in_a_forked_child() -> None:
    r = make_rig()
    tracer = r.provider.get_tracer("tests")
    # the parent has a run in flight when it forks
    open_agent = tracer.start_span("invoke_agent parent-run", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "parent-run"})
    from opentelemetry import trace

    with trace.use_span(open_agent), tracer.start_as_current_span("execute_tool t", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"}):
        pass
    assert r.processor.tracked_traces == 1
    def child() -> tuple[Any, ...]:
        fresh = (r.processor.open_spans, r.processor.tracked_traces, r.processor.active_runs)
        before = len(r.detections)
        docs_loop(r.agent(), turns=5)
        return fresh, [(d.reason.value, d.turn) for d in r.detections[before:]]

    fresh, found = in_forked_child(child)
    assert fresh == (0, 0, 0)
    assert found == [("barren", 4)]
    # the parent is unaffected
    assert r.processor.tracked_traces == 1
    open_agent.end()
    assert r.processor.tracked_traces == 0
