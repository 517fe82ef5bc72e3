"""A batch that arrives after later batches of its trace (the sender retried it, or its
queue's consumers raced): ``serve`` analyses the trace again whole (docs/service.md, *Order
and late spans*), and what the run gets is what it gets in one request.

* The next level of a reason may land on the span that carried the previous one (an
  analysis again puts the run's steps at other turns): it is announced, never the same or a
  lower level again.
* A detection found after its run's agent span was forwarded is written as an annotation
  span naming that agent span (its child), so the agent span's detections are complete.
"""

from __future__ import annotations

import pytest

from otel_progress import Config, ProgressEngine
from otel_progress.service.annotate import annotated_request
from otel_progress.service.detector import BatchDetector, Placement

from .helpers import Request, loop_trace, request

TRACE = 509
AGENT = "0000000000000001"  # (loop_trace's invoke_agent span)


def _placed(batches: list[list]) -> list[Placement]:
    detector = BatchDetector(ProgressEngine(Config()))
    out: list[Placement] = []
    for batch in batches:
        out += detector.process(request(batch).SerializeToString()).placements
    return out


def _levels(placements: list[Placement]) -> tuple[list[int], list[int]]:
    """The levels announced on the run's spans, and those its agent span carries."""
    return (sorted(int(p.detection.level) for p in placements if not p.on_agent),
            sorted(int(p.detection.level) for p in placements if p.on_agent))


SPLITS = [(turns, early, late) for turns in (6, 7, 8) for early in range(2, 2 * turns - 2, 2)
          for late in range(early + 2, 2 * turns, 2)]


def test_the_run_in_one_request_is_parked_and_its_agent_span_carries_every_level() -> None:
    for turns in (6, 7, 8):
        assert _levels(_placed([loop_trace(TRACE, turns=turns)])) == ([1, 2, 3], [1, 2, 3])


@pytest.mark.parametrize(("turns", "early", "late"), SPLITS)
def test_a_late_batch_gives_the_run_what_one_request_gives_it(turns: int, early: int, late: int) -> None:
    spans = loop_trace(TRACE, turns=turns)
    calls, agent = spans[:-1], spans[-1]
    # the first batch, then the later ones with the agent span, then the middle one, late
    placements = _placed([calls[:early], [*calls[late:], agent], calls[early:late]])
    assert _levels(placements) == ([1, 2, 3], [1, 2, 3])


def test_a_level_found_after_the_agent_span_was_forwarded_is_an_annotation_span_naming_it() -> None:
    spans = loop_trace(TRACE, turns=6)
    calls, agent = spans[:-1], spans[-1]
    detector = BatchDetector(ProgressEngine(Config()))
    for batch in (calls[:2], [*calls[8:], agent]):
        detector.process(request(batch).SerializeToString())
    late = request(calls[2:8]).SerializeToString()
    result = detector.process(late)
    after = [p for p in result.placements if p.on_agent]
    assert after and all(p.loc is None and p.parent_id == AGENT for p in after), result.placements
    out, _written = annotated_request(late, result.placements)
    added = [s for rs in Request.FromString(out).resource_spans for ss in rs.scope_spans for s in ss.spans
             if s.name in ("no_progress", "livelock")]
    naming_agent = [s for s in added if {kv.key: kv.value.string_value for kv in s.attributes}.get(
        "progress.annotates.span_id") == AGENT]
    assert len(naming_agent) == len(after), added
    assert all(s.parent_span_id.hex() == AGENT for s in naming_agent)
    assert len({s.span_id for s in added}) == len(added)  # (its own span id, not the tool annotation's)


# -- after a hand-off ---------------------------------------------------------------------------

#: (turns, cuts between batches, the order they arrive in, after how many the trace moves to
#: another process) where a late batch after the hand-off cost the run park when the spans
#: held for the merge window stayed behind (found by a seeded random search of 900 orderings:
#: 244 lost park then, none now)
HAND_OFFS = [
    (6, [2, 11], [2, 0, 1], 2), (6, [1, 4, 10], [0, 2, 3, 1], 3), (6, [5, 6, 8, 9], [3, 2, 1, 4, 0], 3),
    (6, [3, 7, 9], [3, 2, 0, 1], 1), (6, [3, 6], [2, 1, 0], 1), (6, [6, 7, 9], [0, 3, 1, 2], 1),
]


def _moved(turns: int, cuts: list[int], order: list[int], after: int, held_limit: int | None = None
           ) -> tuple[list[int], list[int]]:
    """The batches to one detector, then (its trace's state written with the engine's codec
    and read by another, as the store and the checkpoints carry it) to another."""
    from otel_progress.runs.carry import CARRIED_HELD_BYTES, export_trace, import_trace

    spans = loop_trace(TRACE, turns=turns)
    calls, agent = spans[:-1], spans[-1]
    bounds = [0, *cuts, len(calls)]
    batches = [calls[bounds[i]:bounds[i + 1]] for i in range(len(bounds) - 1)]
    batches[-1] = [*batches[-1], agent]
    first, second = BatchDetector(ProgressEngine(Config())), BatchDetector(ProgressEngine(Config()))
    out: list[Placement] = []
    for n, i in enumerate(order):
        if n == after:
            bundle = export_trace(first.traces, format(TRACE, "032x"), held_limit=(
                CARRIED_HELD_BYTES if held_limit is None else held_limit))
            assert bundle is not None
            assert (bundle.service.held is None) == (held_limit == 0)
            codec = first.traces.engine.state_codec()
            import_trace(second.traces, second.traces.engine.state_codec().loads(codec.dumps(bundle)))
        detector = first if n < after else second
        out += detector.process(request(batches[i]).SerializeToString()).placements
    return _levels(out)


@pytest.mark.parametrize(("turns", "cuts", "order", "after"), HAND_OFFS)
def test_a_late_batch_after_a_hand_off_is_analysed_with_the_spans_that_came_before_it(
        turns: int, cuts: list[int], order: list[int], after: int) -> None:
    assert _moved(turns, cuts, order, after) == ([1, 2, 3], [1, 2, 3])


def test_without_the_held_spans_such_a_late_batch_is_folded_in_and_the_run_stops_short() -> None:
    """What carrying them prevents (a trace whose held spans weigh more than the limit is
    carried without them): the late batch's calls are folded into the continued run."""
    short = [_moved(*case, held_limit=0) for case in HAND_OFFS]
    assert all(3 not in tool for tool, _agent in short), short
