"""The model side of a conversation (engine/model_turns.py): a request left unexecuted, or a
text said, turn after turn, each turn its own agent run (an application that resumes its
agent after every refusal, or calls it again after rejecting its answer), each rule both
ways.

1. The top-level runs naming one conversation are its turns; a request unexecuted in
   ``unexecuted_count`` (3) of them with nothing new between is ``unexecuted_repeat`` with
   scope ``conversation``, on the agent span of the run that completed it; the ladder climbs
   with as many turns again. Unexecuted: refused (a decision record), or the request the
   run ended on (the approval the application asked for).
2. Runs naming no conversation are joined by their trace, never across traces.
3. Quiet: a request approved after a refusal, a turn that made progress, a new user
   question each turn, a different request each turn, a sub-agent's run.
4. Texts: the same text (or reasoning), identical or reworded, ``text_repeat_count`` (3)
   times over two turns or more is ``text_repeat`` with scope ``conversation``; a run that
   says it three times alone is its own run's; quiet with new questions or short texts.
5. Memory: bounded conversations, forgotten after their TTL.
"""

from __future__ import annotations

import time

from otel_progress import Config, ProgressEngine, ToolCall
from otel_progress.engine.config import SIGNAL_NAMES
from otel_progress.model import Detection, ModelOutput, Scope, ToolRequest

from .helpers import S

ARGS = {"order_id": "A-17"}
#: only the model-side signals (the tool signals would judge the repeated calls of a script)
MODEL_ONLY = Config(disabled_signals=frozenset(SIGNAL_NAMES) - {"text_repeat", "unexecuted"})


class Turns:
    """Agent runs fed to one engine, one after another (each its own run id, 10 s apart)."""

    def __init__(self, config: Config | None = None) -> None:
        self.engine = ProgressEngine(config or MODEL_ONLY)
        self.n = 0

    def turn(self, *, conversation: str | None = "conv-1", trace: str | None = None, asks: str | None = "cancel_order",
             args: dict | None = None, refused: bool = False, runs: bool = False, prompt: str = "cancel my order",
             parent: str | None = None, result: str = "cancelled", wrapped: bool = False,
             says: tuple[str, ...] = (), reasons: str | None = None) -> list[Detection]:
        """One run: the model asks for ``asks``; the call is refused (``refused``), runs
        (``runs``) or the run ends awaiting it; the run ends. ``wrapped``: all of it is a
        sub-agent's (``inner-N``), whose invoking run (with no model call of its own) names
        the conversation. ``says``: the texts of the model's outputs before its request
        (``reasons``: their reasoning). Its detections."""
        self.n += 1
        n, e = self.n, self.engine
        trace_id, run_id = trace or f"trace-{n}", f"inner-{self.n}" if wrapped else f"run-{n}"
        t = n * 10 * S
        args = ARGS if args is None else args
        out: list[Detection] = []
        for i, text in enumerate(says):
            at = t - (len(says) - i) * S
            out += e.observe_model(ModelOutput(trace_id=trace_id, run_id=run_id, span_id=f"m{n}-{i}", start_ns=at,
                                               end_ns=at + S // 2, text=text, reasoning=reasons, prompt=prompt))
        if asks:
            out += e.observe_model(ModelOutput(trace_id=trace_id, run_id=run_id, span_id=f"m{n}", start_ns=t,
                                               end_ns=t + S, requests=(ToolRequest(asks, args, f"call_{n}"),),
                                               prompt=prompt))
        if refused or runs:
            out += e.observe(ToolCall(trace_id=trace_id, run_id=run_id, span_id=f"c{n}", name=asks, arguments=args,
                                      result=None if refused else result, executed=not refused, error=refused,
                                      call_id=f"call_{n}", start_ns=t + 2 * S, end_ns=t + 3 * S), flush=True)
        if wrapped:
            summary = e.end_run(trace_id, run_id, span_id=run_id, parent_run_id=f"run-{n}")
            out += list(summary.detections_list if summary is not None else ())
            run_id = f"run-{n}"
        summary = e.end_run(trace_id, run_id, span_id=f"agent{n}", parent_run_id=parent,
                            conversation_id=conversation)
        return out + list(summary.detections_list if summary is not None else ())


def _conv(dets: list[Detection]) -> list[tuple[str, int, str]]:
    return [(d.reason.value, int(d.level), d.span_id) for d in dets if d.scope is Scope.CONVERSATION]


# -- 1. joined by conversation ----------------------------------------------------------------

def test_a_request_refused_in_three_turns_of_a_conversation_is_caught_on_the_third_agent_span() -> None:
    turns = Turns()
    found = [_conv(turns.turn(refused=True)) for _ in range(6)]
    assert found == [[], [], [("unexecuted_repeat", 1, "agent3")], [], [], [("unexecuted_repeat", 2, "agent6")]]
    det = next(d for d in turns.turn(refused=True) + turns.turn(refused=True) + turns.turn(refused=True)
               if d.scope is Scope.CONVERSATION)
    assert int(det.level) == 3 and det.run_id == "run-9" and det.trace_id == "trace-9"
    assert dict(det.figures) == {"unexecuted": 3, "cause": "refused", "requested_tool": "cancel_order",
                                 "conversation_turns": 9, "conversation_id": "conv-1"}
    assert "cancel_order" in det.nudge


def test_the_request_a_run_ends_on_counts_as_unexecuted_in_its_turn() -> None:
    """The application ends the run at the request to ask the user, then resumes the agent
    with the refusal in its input (no decision record): the same."""
    turns = Turns()
    found = [_conv(turns.turn()) for _ in range(3)]
    assert found == [[], [], [("unexecuted_repeat", 1, "agent3")]]
    again = turns.engine.end_run("trace-3", "run-3", span_id="agent3", conversation_id="conv-1")
    assert again is None or again.detections_list == ()  # (a run ended twice is one turn)


def test_parked_is_not_announced_again() -> None:
    turns = Turns()
    levels = [d.level for _ in range(15) for d in turns.turn(refused=True) if d.scope is Scope.CONVERSATION]
    assert [int(lv) for lv in levels] == [1, 2, 3]


# -- 2. joined by trace, never across traces --------------------------------------------------

def test_runs_naming_no_conversation_are_joined_by_their_trace() -> None:
    turns = Turns()
    found = [_conv(turns.turn(conversation=None, trace="app-trace", refused=True)) for _ in range(3)]
    assert found == [[], [], [("unexecuted_repeat", 1, "agent3")]]


def test_runs_of_different_traces_naming_no_conversation_are_not_joined() -> None:
    turns = Turns()
    assert [d for _ in range(6) for d in turns.turn(conversation=None, refused=True)] == []


def test_runs_of_different_conversations_are_not_joined() -> None:
    turns = Turns()
    assert [d for i in range(6) for d in turns.turn(conversation=f"conv-{i % 4}", refused=True)] == []


# -- 3. quiet -------------------------------------------------------------------------------------

def test_a_request_approved_after_refusals_is_forgotten() -> None:
    turns = Turns()
    dets = turns.turn(refused=True) + turns.turn(refused=True) + turns.turn(runs=True)
    dets += turns.turn(refused=True) + turns.turn(refused=True)
    assert _conv(dets) == []
    assert _conv(turns.turn(refused=True)) == [("unexecuted_repeat", 1, "agent6")]  # (counted afresh)


def test_a_turn_that_made_progress_resets_the_count_and_the_ladder() -> None:
    turns = Turns()
    dets: list[Detection] = []
    for _ in range(3):
        dets += turns.turn(refused=True)
    assert _conv(dets) == [("unexecuted_repeat", 1, "agent3")]
    turns.turn(asks="lookup_order", runs=True, result="order A-17: shipped")  # (a result it had not seen)
    dets = [d for _ in range(3) for d in turns.turn(refused=True)]
    assert _conv(dets) == [("unexecuted_repeat", 1, "agent7")]  # (level 1 again: something new came)


def test_a_new_user_question_each_turn_is_quiet() -> None:
    turns = Turns()
    assert [d for i in range(6) for d in turns.turn(prompt=f"question {i}")] == []


def test_a_different_request_each_turn_is_quiet() -> None:
    turns = Turns()
    assert [d for i in range(6) for d in turns.turn(args={"order_id": f"A-{i}"}, refused=True)] == []


def test_a_sub_agents_runs_are_not_turns() -> None:
    turns = Turns()
    assert [d for _ in range(6) for d in turns.turn(parent="root-run", refused=True)
            if d.scope is Scope.CONVERSATION] == []


def test_a_sub_agents_model_side_counts_as_its_invoking_runs_turn() -> None:
    """The framework wraps its graph in an agent span of its own: the model calls are the
    inner run's, the conversation is named on the outer one (LangGraph under OpenLLMetry)."""
    turns = Turns()
    found = [_conv(turns.turn(wrapped=True)) for _ in range(3)]
    assert found == [[], [], [("unexecuted_repeat", 1, "agent3")]]
    det = next(d for d in turns.turn(wrapped=True) + turns.turn(wrapped=True) + turns.turn(wrapped=True)
               if d.scope is Scope.CONVERSATION)
    assert (det.run_id, det.trace_id, int(det.level)) == ("run-6", "trace-6", 2)
    asked = Turns()
    assert [d for i in range(6) for d in asked.turn(wrapped=True, prompt=f"question {i}")] == []


def test_without_the_unexecuted_signal_nothing_is_joined() -> None:
    turns = Turns(Config(disabled_signals=frozenset(SIGNAL_NAMES) - {"text_repeat"}))
    assert [d for _ in range(6) for d in turns.turn(refused=True)] == []


# -- 4. texts ----------------------------------------------------------------------------------

ANSWER = "Your order A-17 has been cancelled and the refund will arrive within five days."
REWORDED = "The refund will arrive within five days: your order A-17 has been cancelled."


def test_the_same_answer_in_three_turns_is_a_text_repeat_of_the_conversation() -> None:
    turns = Turns()
    found = [_conv(turns.turn(says=(ANSWER,), asks=None)) for _ in range(3)]
    assert found == [[], [], [("text_repeat", 1, "agent3")]]


def test_a_reworded_answer_and_the_counts_within_turns_add_up() -> None:
    turns = Turns()
    assert _conv(turns.turn(says=(ANSWER, REWORDED), asks=None)) == []
    dets = turns.turn(says=(REWORDED,), asks=None)
    assert _conv(dets) == [("text_repeat", 1, "agent2")]
    assert dict(dets[-1].figures) == {"repeats": 3, "part": "text", "conversation_turns": 2,
                                      "conversation_id": "conv-1"}


def test_a_run_saying_it_three_times_alone_is_its_runs_detection() -> None:
    dets = Turns().turn(says=(ANSWER, ANSWER, ANSWER, ANSWER), asks=None)
    assert [(d.reason.value, d.scope.value) for d in dets] == [("text_repeat", "agent")]


def test_the_same_reasoning_in_three_turns_is_caught() -> None:
    turns = Turns()
    thought = "I should check the order status again before answering the question about refunds."
    dets = [d for i in range(3) for d in turns.turn(says=(f"Attempt {i}: checking order {i}.",), reasons=thought,
                                                     asks=None)]
    assert [(d.reason.value, d.figures["part"]) for d in dets if d.scope is Scope.CONVERSATION] == [
        ("text_repeat", "reasoning")]


def test_the_same_answer_to_new_questions_and_short_texts_are_quiet() -> None:
    turns = Turns()
    assert [d for i in range(6) for d in turns.turn(says=(ANSWER,), prompt=f"question {i}", asks=None)] == []
    short = Turns()
    assert [d for _ in range(6) for d in short.turn(says=("Done.",), asks="lookup_order", runs=True)] == []


# -- 5. memory --------------------------------------------------------------------------------

def test_conversations_are_bounded_and_forgotten_after_their_ttl() -> None:
    turns = Turns(Config(disabled_signals=MODEL_ONLY.disabled_signals, max_conversations=2,
                         conversation_ttl_seconds=60))
    table = turns.engine._scopes.model_turns
    assert table is not None
    for i in range(4):
        turns.turn(conversation=f"conv-{i}", refused=True)
    assert len(table) == 2
    # two turns of conv-3 left; past the TTL they are forgotten, so a third turn starts over
    turns.turn(conversation="conv-3", refused=True)
    turns.engine.evict_idle(time.monotonic() + 61)
    assert len(table) == 0
    assert _conv(turns.turn(conversation="conv-3", refused=True)) == []


def test_a_trace_analysed_again_whole_counts_each_run_once() -> None:
    """serve analyses a trace again whole when a late span arrives: the engine forgets it
    (``discard_trace``: no run ended, no turn counted) and its runs are replayed and end
    again; a run whose turn was counted is not counted twice."""
    turns = Turns()
    turns.turn(refused=True)
    turns.turn(refused=True)
    e = turns.engine
    e.observe_model(ModelOutput(trace_id="trace-2", run_id="run-2", span_id="m2-again", start_ns=0, end_ns=S,
                                requests=(ToolRequest("cancel_order", ARGS, "call_x"),), prompt="cancel my order"))
    assert e.discard_trace("trace-2") and not e.discard_trace("trace-2")
    assert e.end_run("trace-2", "run-2", span_id="agent2", conversation_id="conv-1") is None  # (forgotten)
    e.observe(ToolCall(trace_id="trace-2", run_id="run-2", span_id="c2", name="cancel_order", arguments=ARGS,
                       executed=False, error=True, start_ns=2 * S, end_ns=3 * S), flush=True)
    again = e.end_run("trace-2", "run-2", span_id="agent2", conversation_id="conv-1")
    assert again is not None and [d for d in again.detections_list if d.scope is Scope.CONVERSATION] == []
    assert _conv(turns.turn(refused=True)) == [("unexecuted_repeat", 1, "agent3")]


def test_the_conversations_continue_in_another_engine_from_their_written_state() -> None:
    """``conversation_state`` written with the engine's codec and ``adopt_conversations`` in
    another process (serve's checkpoint): two refused turns there, the third here."""
    first = Turns()
    first.turn(refused=True)
    first.turn(refused=True)
    data = first.engine.state_codec().dumps(first.engine.conversation_state())
    second = Turns()
    second.n = first.n
    state = second.engine.state_codec().loads(data)
    assert second.engine.adopt_conversations(state, idle=5.0) == 1
    assert second.engine.adopt_conversations(state) == 0  # (those it follows are kept)
    assert _conv(second.turn(refused=True)) == [("unexecuted_repeat", 1, "agent3")]
    # past the TTL since it was written, the conversation is forgotten at the next eviction
    late = Turns(Config(disabled_signals=MODEL_ONLY.disabled_signals, conversation_ttl_seconds=60))
    late.engine.adopt_conversations(late.engine.state_codec().loads(data), idle=120.0)
    late.engine.evict_idle()
    assert late.engine._scopes.model_turns is not None and len(late.engine._scopes.model_turns) == 0


def test_one_conversation_is_written_alone_and_a_newer_state_replaces_the_one_followed() -> None:
    """The hand-off store writes one conversation at a time (``conversations=[id]``) and a
    replica that reads a newer state of it replaces its own (``replace=True``); without
    ``replace`` the one it follows is kept."""
    first = Turns()
    first.turn(refused=True, conversation="conv-a")
    first.turn(refused=True, conversation="conv-b")
    only_a = first.engine.conversation_state(conversations=["conv-a"])
    assert [key for key, _conv, _age in only_a["model_turns"]["conversations"]] == ["c:conv-a"]
    first.turn(refused=True, conversation="conv-a")  # (a second turn of conv-a there)
    newer = first.engine.state_codec().loads(first.engine.state_codec().dumps(
        first.engine.conversation_state(conversations=["conv-a"])))
    second = Turns()
    second.n = first.n
    second.engine.adopt_conversations(first.engine.state_codec().loads(first.engine.state_codec().dumps(only_a)))
    assert second.engine.adopt_conversations(newer) == 0  # (kept: one refused turn)
    assert second.engine.adopt_conversations(newer, replace=True) == 1  # (two refused turns)
    assert _conv(second.turn(refused=True, conversation="conv-a")) == [("unexecuted_repeat", 1, f"agent{second.n}")]
