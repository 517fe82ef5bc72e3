"""The conversation scope (engine/conversations.py, engine/signals/conversation.py): the
runs of one conversation across traces, one per user turn. Turns that bring nothing new
(every request already made in the conversation, answered the same) ``conversation_turns``
times in a row are a ``signature_repeat`` with scope ``conversation``; a new request or a
new answer resets. Each rule is proved both ways."""

from __future__ import annotations

from typing import Any

import pytest

from otel_progress import NOT_CAPTURED, Config, ConfigError, ProgressEngine, Reason, ToolCall
from otel_progress.model import Detection, Scope

from .helpers import S

LOOKUPS = [("get_order", {"id": "A-1"}, {"status": "shipped", "eta": "unknown"}),
           ("track_parcel", {"order": "A-1"}, {"events": []})]


class Chat:
    """Turns of conversations fed to one engine: one trace and one agent run per turn."""

    def __init__(self, config: Config | None = None) -> None:
        self.engine = ProgressEngine(config or Config())
        self.n = 0

    def turn(self, calls: list[tuple[str, Any, Any]], conversation: str | None = "conv-1", *,
             error: bool = False, tokens: int = 100, now: float | None = None,
             sub_agent: list[tuple[str, Any, Any]] | None = None) -> list[Detection]:
        self.n += 1
        trace, run = f"{self.n:032x}", f"{self.n:016x}"
        engine = self.engine
        for i, (name, args, result) in enumerate(calls):
            engine.observe(ToolCall(name=name, arguments=args, result=result, error=error, trace_id=trace,
                                    span_id=f"{self.n:08x}{i:08x}", run_id=run, start_ns=i * S,
                                    end_ns=i * S + S // 2), flush=True, now=now)
        engine.record_tokens(trace, run, tokens, now=now)
        if sub_agent is not None:
            sub = f"{self.n:08x}ffffffff"
            for i, (name, args, result) in enumerate(sub_agent):
                engine.observe(ToolCall(name=name, arguments=args, result=result, trace_id=trace,
                                        span_id=f"{self.n:08x}{i + 100:08x}", run_id=sub, start_ns=(50 + i) * S,
                                        end_ns=(50 + i) * S + 1), flush=True, now=now)
            engine.end_run(trace, sub, span_id=sub, parent_run_id=run, conversation_id=conversation, now=now)
        summary = engine.end_run(trace, run, span_id=run, conversation_id=conversation, now=now)
        engine.end_trace(trace)
        assert summary is not None
        return [d for d in summary.detections_list if d.scope is Scope.CONVERSATION]


def test_the_same_lookups_answered_the_same_turn_after_turn_are_caught_on_the_third_barren_turn() -> None:
    chat = Chat()
    found = [chat.turn(LOOKUPS) for _ in range(4)]
    assert found[:3] == [[], [], []]
    (det,) = found[3]
    assert det.reason is Reason.SIGNATURE_REPEAT and det.event == "livelock"
    assert det.scope is Scope.CONVERSATION and det.turn == 4 and int(det.level) == 1
    assert det.span_id == det.run_id == f"{4:016x}" and det.trace_id == f"{4:032x}"  # the agent span of the turn
    assert det.figures["visits"] == 3 and det.figures["tokens_burned"] == 300
    assert det.figures["conversation_id"] == "conv-1"
    assert det.event_attributes()["progress.scope"] == "conversation"


def test_the_loop_going_on_escalates_and_a_new_answer_resets_the_level() -> None:
    chat = Chat()
    levels = [int(d.level) for _ in range(10) for d in chat.turn(LOOKUPS)]
    assert levels == [1, 2, 3]  # turns 4, 7 and 10
    assert [int(d.level) for _ in range(3) for d in chat.turn(LOOKUPS)] == []  # parked: counted, not announced
    chat.turn([("get_order", {"id": "A-1"}, {"status": "delivered"})])  # the world answered something new
    assert [int(d.level) for _ in range(3) for d in chat.turn(LOOKUPS)] == [1]


def test_a_healthy_chat_new_questions_new_answers_stays_quiet() -> None:
    chat = Chat()
    for i in range(12):
        assert chat.turn([("get_order", {"id": f"A-{i}"}, {"status": "shipped", "id": f"A-{i}"})]) == []


def test_a_new_question_answered_as_before_is_new_and_resets_the_count() -> None:
    chat = Chat()
    assert [d for _ in range(3) for d in chat.turn(LOOKUPS)] == []
    chat.turn([*LOOKUPS, ("get_order", {"id": "B-7"}, {"status": "shipped", "eta": "unknown"})])
    assert [d for _ in range(2) for d in chat.turn(LOOKUPS)] == []  # 2 barren turns since: not yet
    assert len(chat.turn(LOOKUPS)) == 1


def test_repeating_an_earlier_turn_of_the_conversation_is_barren_too() -> None:
    chat = Chat()
    a, b = LOOKUPS[:1], LOOKUPS[1:]
    chat.turn(a)
    chat.turn(b)
    assert chat.turn(a) == [] and chat.turn(b) == []
    assert len(chat.turn(a)) == 1  # three turns in a row asked only what it had asked


def test_conversations_are_kept_apart_and_runs_without_one_are_not_turns() -> None:
    chat = Chat()
    for _ in range(4):
        assert chat.turn(LOOKUPS, conversation=None) == []
    for _ in range(3):
        assert chat.turn(LOOKUPS, conversation="a") == [] and chat.turn(LOOKUPS, conversation="b") == []
    assert len(chat.turn(LOOKUPS, conversation="a")) == 1 and len(chat.turn(LOOKUPS, conversation="b")) == 1


def test_a_turn_that_cannot_be_judged_breaks_the_row() -> None:
    chat = Chat()
    for _ in range(3):
        chat.turn(LOOKUPS)
    chat.turn([("get_order", {"id": "A-1"}, NOT_CAPTURED)])  # content capture off: unknown
    assert [d for _ in range(2) for d in chat.turn(LOOKUPS)] == []
    assert len(chat.turn(LOOKUPS)) == 1
    quiet = Chat()
    for _ in range(8):  # with content capture off no turn is ever judged
        assert quiet.turn([("get_order", {"id": "A-1"}, NOT_CAPTURED)]) == []
    failing = Chat()
    for _ in range(8):  # a turn of failures only: nothing known to compare
        assert failing.turn([("get_order", {"id": "A-1"}, "timeout")], error=True) == []
    chat_only = Chat()
    for _ in range(8):  # turns that called no tool (answered from the model alone)
        assert chat_only.turn([]) == []


def test_a_sub_agents_requests_count_as_its_invoking_turns() -> None:
    chat = Chat()
    sub = [("search_kb", {"q": "refund"}, {"hits": ["kb-1"]})]
    for _ in range(3):
        assert chat.turn(LOOKUPS, sub_agent=sub) == []
    # the top-level run repeats itself but its sub-agent finds something new: not barren
    assert chat.turn(LOOKUPS, sub_agent=[("search_kb", {"q": "refund"}, {"hits": ["kb-2"]})]) == []
    assert [d for _ in range(2) for d in chat.turn(LOOKUPS, sub_agent=sub)] == []
    assert len(chat.turn(LOOKUPS, sub_agent=sub)) == 1


def test_conversation_turns_is_the_threshold() -> None:
    chat = Chat(Config(conversation_turns=1))
    assert chat.turn(LOOKUPS) == []
    assert len(chat.turn(LOOKUPS)) == 1
    with pytest.raises(ConfigError):
        Config(conversation_turns=0)
    assert Config.from_mapping({"conversation_turns": "5"}).conversation_turns == 5


def test_disabling_the_signal_turns_the_scope_off() -> None:
    chat = Chat(Config(disabled_signals=frozenset({"conversation"})))
    assert [d for _ in range(8) for d in chat.turn(LOOKUPS)] == []
    assert chat.engine._scopes.conversations is None


def test_state_is_bounded_by_max_conversations_and_the_ttl() -> None:
    chat = Chat(Config(max_conversations=2, conversation_ttl_seconds=60))
    for _ in range(3):
        chat.turn(LOOKUPS, conversation="a", now=0)
    chat.turn(LOOKUPS, conversation="b", now=1)
    chat.turn(LOOKUPS, conversation="c", now=2)  # "a" is the least recently used: forgotten
    assert len(chat.engine._scopes.conversations) == 2
    assert chat.turn(LOOKUPS, conversation="a", now=3) == []  # a first turn again
    chat.turn(LOOKUPS, conversation="a", now=4)
    chat.turn(LOOKUPS, conversation="a", now=5)
    assert chat.engine.evict_idle(now=64.5) == 0 and len(chat.engine._scopes.conversations) == 1  # "a" kept (5 + 60)
    assert len(chat.turn(LOOKUPS, conversation="a", now=64.5)) == 1
    chat.engine.evict_idle(now=200)
    assert len(chat.engine._scopes.conversations) == 0


def test_memory_of_a_conversation_is_bounded() -> None:
    chat = Chat(Config(max_evidence=4))  # the conversation remembers 16 requests
    for i in range(40):
        chat.turn([("get_order", {"id": f"A-{i}"}, {"n": i})])
    assert len(chat.engine._scopes.conversations.conversations["conv-1"].seen) <= 16


def test_a_turn_with_more_distinct_requests_than_max_evidence_is_not_judged() -> None:
    big = [("get_order", {"id": f"A-{i}"}, {"n": i}) for i in range(5)]
    capped = Chat(Config(max_evidence=4))
    for _ in range(6):
        assert capped.turn(big) == []
    wide = Chat(Config(max_evidence=5))
    assert [len(wide.turn(big)) for _ in range(4)] == [0, 0, 0, 1]
    record = wide.engine.pipeline.signals[0].new_state()
    assert record.items.itemsize == 8  # 8 bytes a request
