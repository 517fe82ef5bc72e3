"""What a wasted step really cost (issue 29, item 7): the input tokens of the model calls in
the wasted stretch, as a detection figure and as ``progress.wasted.input_tokens``, through
the real SDK and the processor."""

from __future__ import annotations

from tests.processor.conftest import make_rig, progress_events


def _run(agent, progress_steps: int, loop_steps: int) -> None:  # type: ignore[no-untyped-def]
    """Steps that each find a new document, then searches that come back empty; each model
    call reads a context that grows by 500 tokens a step."""
    with agent.agent("docs-agent"):
        for i in range(progress_steps + loop_steps):
            agent.chat(1000 + 500 * i, 50)
            found = i < progress_steps
            agent.tool("search_docs", {"q": f"refund policy variant {i}"},
                       {"results": [f"doc-{i}"], "total": 1} if found else {"results": [], "total": 0})


def test_the_wasted_stretch_counts_the_context_each_step_read_again() -> None:
    r = make_rig()
    _run(r.agent(), progress_steps=3, loop_steps=7)
    first = r.detections[0]
    # the stretch starts after the third step (the last that found something): the model
    # calls of steps 4 .. the detection's turn read 2500, 3000, ... tokens each
    expected = sum(1000 + 500 * i for i in range(3, first.turn))
    assert first.figures["wasted_input_tokens"] == expected
    events = progress_events(r.by_id()[first.span_id])
    assert events and events[0][1]["progress.wasted_input_tokens"] == expected
    m = r.metrics()
    # the run's wasted stretch to its end: every model call from step 4 on
    assert m["progress.wasted.input_tokens"] == [({"gen_ai.agent.name": "docs-agent"},
                                                  sum(1000 + 500 * i for i in range(3, 10)))]


def test_no_figure_where_model_calls_report_no_input_tokens() -> None:
    r = make_rig()
    agent = r.agent()
    with agent.agent("docs-agent"):
        for i in range(6):
            agent.tool("search_docs", {"q": f"variant {i}"}, {"results": [], "total": 0})
    assert r.detections and "wasted_input_tokens" not in r.detections[0].figures
    assert "progress.wasted.input_tokens" not in r.metrics()
