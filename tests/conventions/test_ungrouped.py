"""The condition of the set-up warning (otel_progress.runs.ungrouped): root tool spans
naming no conversation, MIN_SPANS of one service within WINDOW_SECONDS, decided once per
service, with bounded memory."""

from __future__ import annotations

from otel_progress.conventions.grouping import names_conversation, ungrouped_root
from otel_progress.conventions.spans import SpanRecord
from otel_progress.runs.ungrouped import MIN_SPANS, WINDOW_SECONDS, UngroupedWatch, Verdict

S = 1_000_000_000


def test_which_spans_are_ungrouped() -> None:
    assert ungrouped_root(SpanRecord("t", "s", attributes={"gen_ai.tool.name": "x"}))
    assert not ungrouped_root(SpanRecord("t", "s", parent_id="p"))  # under a parent: its trace's run
    assert not ungrouped_root(SpanRecord("t", "s", attributes={"gen_ai.conversation.id": "c"}))
    assert not ungrouped_root(SpanRecord("t", "s", attributes={"session.id": 42}))
    assert not names_conversation({"gen_ai.conversation.id": "  ", "session.id": True})  # blank, not a name


def test_the_condition_is_met_once_per_service_and_counted_from_there() -> None:
    watch = UngroupedWatch()
    assert MIN_SPANS == 3 and WINDOW_SECONDS == 300.0
    # out of order (serve gets spans as batches come), within the window: met at the third
    assert [watch.seen("a", t * S) for t in (100, 5, 50)] == [(0, False), (0, False), Verdict(3, True)]
    assert watch.seen("a", 1_000 * S) == (1, False) and watch.met("a")
    assert watch.seen("b", 0) == (0, False) and not watch.met("b")  # another service: its own count
    assert watch.seen(None, 0) == (0, False)  # no service.name: one service of its own


def test_spans_too_far_apart_never_meet_it() -> None:
    watch = UngroupedWatch()
    assert all(watch.seen("a", t * 200 * S) == (0, False) for t in range(10))


def test_the_services_followed_are_bounded() -> None:
    watch = UngroupedWatch(max_services=2)
    watch.seen("a", 0)
    watch.seen("a", 1)
    watch.seen("b", 0)
    watch.seen("c", 0)  # "a" is forgotten: its two spans with it
    assert watch.seen("a", 2) == (0, False)
    assert len(watch) == 2
