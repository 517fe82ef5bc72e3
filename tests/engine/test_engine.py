"""Engine behaviour: steps, ordering, idempotency, bounds, digests, escalation."""

from __future__ import annotations

import random

from otel_progress import NOT_CAPTURED, Config, ProgressEngine, Reason, ToolCall
from otel_progress.evidence.canonical import Digester

from .helpers import S, brief, call, make_calls, run


def _parallel_batch(order: list[int], turn: int) -> list[ToolCall]:
    base = turn * 100
    calls = [
        ToolCall(name="read_file", arguments={"path": f"f{i}"}, result=f"content {i}", start_ns=base * S,
                 end_ns=(base + 1 + i) * S, trace_id="t", span_id=f"{turn}-{i}", parent_id=f"resp-{turn}")
        for i in range(3)
    ]
    return [calls[i] for i in order]


def test_parallel_calls_are_one_step_whatever_their_completion_order() -> None:
    engine = ProgressEngine(Config())
    dets = []
    for turn, order in enumerate(([0, 1, 2], [2, 0, 1])):
        batch = _parallel_batch(order, turn)
        for j, c in enumerate(batch):
            dets += engine.observe(c, flush=j == len(batch) - 1)
    # Two steps with the same multiset of calls and results: a period-1 repeat at turn 2.
    assert brief(dets) == [(2, "repeat_cycle", 1)]
    assert dets[0].tool == "read_file"


def test_parallel_batch_turn_counts_steps_not_calls() -> None:
    engine = ProgressEngine(Config())
    for j, c in enumerate(_parallel_batch([0, 1, 2], 0)):
        engine.observe(c, flush=j == 2)
    state = engine.run_state("t", "")
    assert state is not None and state.turn == 1


def test_calls_arriving_out_of_order_within_the_allowance_are_reordered() -> None:
    A = call("get_order", {"id": 1}, "a")
    B = call("get_shipment", {"id": 1}, "b")
    calls = make_calls([A, B, A, B, A, B])
    shuffled = calls[:]
    random.Random(7).shuffle(shuffled)
    engine = ProgressEngine(Config())
    dets = []
    for c in shuffled:
        dets += engine.observe(c)
    dets += engine.flush("t1")
    assert brief(dets)[:1] == [(4, "repeat_cycle", 1)]
    assert dets[0].span_id == calls[3].span_id


def test_redelivered_calls_are_ignored() -> None:
    seq = make_calls([call("f", {"x": i}, f"r{i}") for i in range(5)])
    engine = ProgressEngine(Config())
    dets = []
    for c in seq + seq:  # the whole batch delivered twice (a retry)
        dets += engine.observe(c)
    dets += engine.flush("t1")
    assert dets == []
    assert engine.stats.duplicates == 5
    state = engine.run_state("t1", "")
    assert state is not None and state.turn == 5


def test_late_calls_are_folded_in_and_counted() -> None:
    seq = make_calls([call("f", {"x": i}, f"r{i}") for i in range(4)])
    engine = ProgressEngine(Config())
    for c in seq[1:]:
        engine.observe(c, flush=True)
    engine.observe(seq[0], flush=True)
    assert engine.stats.late_calls == 1
    state = engine.run_state("t1", "")
    assert state is not None and state.turn == 4 and state.late == 1


def test_reorder_buffer_is_bounded() -> None:
    engine = ProgressEngine(Config(reorder_window=4))
    # Overlapping calls (same parent) never complete a step on their own: the buffer
    # must still release once it holds more than the allowance.
    for i in range(10):
        engine.observe(ToolCall(name="f", arguments={"i": i}, result=str(i), start_ns=0, end_ns=10**12,
                                trace_id="t", span_id=f"s{i}", parent_id="p"))
    state = engine.run_state("t", "")
    assert state is not None and len(state.pending) <= 5


def test_runs_are_capped_lru_and_idle_traces_evicted() -> None:
    engine = ProgressEngine(Config(max_runs=50))
    for i in range(500):
        engine.observe(ToolCall(name="f", arguments={}, result="x", trace_id=f"trace-{i}", span_id="s", run_id="r"),
                       now=float(i))
    assert engine.active_runs <= 50
    assert engine.stats.traces_evicted == 450
    assert engine.run_state("trace-499", "r") is not None  # the newest survive
    survivors = engine.active_traces
    assert engine.evict_idle(now=499.0 + engine.config.run_ttl_seconds + 1) == survivors
    assert engine.active_traces == 0 and engine.active_runs == 0


def test_end_run_frees_the_run_and_summarises_wasted_work() -> None:
    engine = ProgressEngine(Config())
    for c in make_calls([call("read", {"p": "a"}, "same")] * 5, trace_id="t", run_id="agent-1"):
        engine.record_tokens("t", "agent-1", 1000)
        engine.observe(c, flush=True)
    summary = engine.end_run("t", "agent-1", span_id="agent-1")
    assert summary is not None
    assert summary.turns == 5 and summary.first_detection_turn == 2
    assert summary.wasted_turns == 3 and summary.wasted_tokens == 3000
    assert engine.run_state("t", "agent-1") is None and engine.active_runs == 0


def test_runs_of_one_trace_are_independent() -> None:
    engine = ProgressEngine(Config())
    dets = []
    for i in range(3):
        for run_id in ("a", "b"):
            dets += engine.observe(ToolCall(name="f", arguments={"i": i}, result=f"{run_id}{i}", start_ns=i * S,
                                            end_ns=i * S + 1, trace_id="t", span_id=f"{run_id}{i}", run_id=run_id),
                                   flush=True)
    assert dets == []  # interleaving two healthy runs never looks like a cycle


def test_keyed_digests_differ_from_unkeyed_and_by_key() -> None:
    plain, k1, k2 = Digester(), Digester(key="secret-1"), Digester(key="secret-2")
    assert plain.text("x") != k1.text("x") != k2.text("x")
    assert k1.text("x") == Digester(key="secret-1").text("x")
    assert k1.keyed and not plain.keyed


def test_digest_key_from_environment_changes_exported_signatures() -> None:
    seq = [call("fetch_user", {"id": 1}, None, error=True, error_type="E", error_message="404")] * 6
    base = Config(disabled_signals=frozenset({"repeat", "signature", "frequency"}))
    a = run(seq, Config.from_env({}, base=base))
    b = run(seq, Config.from_env({"OTEL_PROGRESS_DIGEST_KEY": "k"}, base=base))
    # the identical failing request is caught by its third failure, and again by the sixth
    assert [(d.reason, d.turn) for d in a] == [(d.reason, d.turn) for d in b] == [
        (Reason.ERROR_RECURRENCE, 3), (Reason.ERROR_RECURRENCE, 6)]
    assert a[0].figures["error_signature"] != b[0].figures["error_signature"]


def test_content_capture_off_uses_published_state() -> None:
    seq = []
    for _ in range(2):
        for state in ("s1", "s0"):
            seq += [call("edit", NOT_CAPTURED, NOT_CAPTURED, state=state),
                    call("test", NOT_CAPTURED, NOT_CAPTURED, state=state)]
    assert brief(run(seq)) == [(7, "state_revisit", 1)]


def test_plan_advance_and_goal_distance_reset_the_barren_counter() -> None:
    same = [call("search", {"q": f"q{i}"}, "0 results", plan_step=f"step-{i // 3}") for i in range(9)]
    assert run(same) == []
    closer = [call("search", {"q": f"q{i}"}, "0 results", goal_distance=10 - i) for i in range(9)]
    assert run(closer) == []
    stuck = [call("search", {"q": f"q{i}"}, "0 results", goal_distance=10) for i in range(9)]
    assert brief(run(stuck))[:1] == [(4, "barren", 1)]


def test_memory_of_a_run_is_bounded_by_the_window() -> None:
    engine = ProgressEngine(Config())
    for i in range(5000):
        engine.observe(ToolCall(name=f"t{i % 7}", arguments={"i": i}, result=f"r{i}", start_ns=i * S,
                                end_ns=i * S + 1, trace_id="t", span_id=f"s{i}"), flush=True)
    state = engine.run_state("t", "")
    assert state is not None
    names = [s.name for s in engine.pipeline.signals]
    repeat_window = state.states[names.index("repeat")]
    assert len(repeat_window) == engine.config.window
    assert len(state.states[names.index("compaction")].epoch) <= 1024
    assert len(state.evidence) <= engine.config.max_evidence
    assert len(state.attempts) <= 8


def test_an_error_inside_a_signal_is_contained() -> None:
    engine = ProgressEngine(Config())

    class Boom:
        name = "boom"

        def evaluate(self, *a: object) -> None:
            raise RuntimeError("bug")

        def new_state(self) -> None:
            return None

        def reset(self, s: object) -> None:
            return None

    engine.pipeline.signals = (*engine.pipeline.signals, Boom())  # type: ignore[assignment]
    assert engine.observe(ToolCall(name="f", arguments={}, result="x", trace_id="t", span_id="s"), flush=True) == []
    assert engine.stats.errors == 1
