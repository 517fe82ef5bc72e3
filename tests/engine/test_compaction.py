"""Compaction boundaries (signals/compaction.py, ProgressEngine.compaction): each rule both
ways.

1. A re-read right after a compaction of what was read before it is expected once: quiet;
   a second re-read after the same compaction counts.
2. A loop that goes on across a compaction is the same loop: caught at the same step as
   without the compaction.
3. Compactions in a row with nothing new between them are a ``compaction_livelock``;
   compactions with something new between them are not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from otel_progress import NOT_CAPTURED, Config, ProgressEngine, Reason
from otel_progress.model import Compaction, Detection

from .helpers import S, brief, call, make_calls

#: A compaction between the calls of a session script.
COMPACT = {"compact": True}


def _read(path: str, content: str | None = None) -> dict[str, Any]:
    return call("read_file", {"path": path}, content if content is not None else f"the text of {path}")


def _sized(command: str, size: int) -> dict[str, Any]:
    """A call known only by its arguments and the size of its result (level ``arguments``)."""
    return call("Bash", {"command": command}, f"<{size} bytes>", evidence_level="arguments", result_truncated=True)


def session(items: Sequence[dict[str, Any]], config: Config | None = None, *, tokens: int = 0,
            flush: bool = False) -> list[Detection]:
    """Feed a script of calls and compactions (:data:`COMPACT`, or a dict with
    ``compact=True`` and :class:`Compaction` fields) to one engine in order, as the log
    tracker does (calls buffered, ``flush``: each call a step of its own at once);
    ``tokens`` are recorded after each call. The detections, the trace ended."""
    engine = ProgressEngine(config or Config())
    calls = iter(make_calls([i for i in items if not i.get("compact")]))
    out: list[Detection] = []
    for n, item in enumerate(items):
        if item.get("compact"):
            fields = {k: v for k, v in item.items() if k != "compact"}
            at = (n * 10 - 5) * S  # between the call before (started at (n-1)*10 s) and the next
            out += engine.compaction(Compaction(trace_id="t1", run_id="", time_ns=at, span_id=f"c{n}", **fields))
            continue
        out += engine.observe(next(calls), flush=flush)
        if tokens:
            engine.record_tokens("t1", "", tokens)
    out += engine.flush("t1")
    for summary in engine.end_trace("t1"):
        out += summary.detections_list
    return out


def without_compactions(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in items if not i.get("compact")]


FILES = [_read(p) for p in ("a.py", "b.py", "c.py", "d.py")]


# -- 1. the re-read after a compaction is expected once --------------------------------------


def test_re_reading_what_was_read_before_the_compaction_is_quiet() -> None:
    script = [*FILES, COMPACT, *FILES, _read("e.py")]
    assert session(script) == []
    # without the boundary the same four reads again are revisits of the same places (then
    # a repeated block, barren steps)
    assert [(d.turn, d.reason) for d in session(without_compactions(script))] == [(7, Reason.STATE_REVISIT)]


def test_the_re_read_is_expected_once_a_second_re_read_counts() -> None:
    script = [*FILES, COMPACT, *FILES, *FILES]
    dets = session(script)
    # in the second round, as the first round was without a boundary (the third revisit)
    assert dets and dets[0].turn == 11, brief(dets)
    assert session(without_compactions(script))[0].turn == 7


def test_a_re_read_with_a_new_result_is_progress_not_a_recovery() -> None:
    script = [*FILES, COMPACT, _read("a.py", "a changed"), *FILES[1:], _read("e.py")]
    assert session(script) == []


def test_parallel_re_reads_are_one_recovery_step() -> None:
    batch = [{**f, "t": 100.0, "duration": 2.0, "parent_id": "r"} for f in FILES]
    engine = ProgressEngine(Config())
    first = make_calls(FILES)
    again = make_calls(batch)
    for i, c in enumerate(again):
        c.span_id = f"again-{i}"
    out = [d for c in first for d in engine.observe(c, flush=True)]
    out += engine.compaction(Compaction(trace_id="t1", time_ns=90 * S, span_id="c"))
    for c in again:
        out += engine.observe(c)
    out += engine.flush("t1")
    assert out == []
    state = engine.run_state("t1", "")
    assert state is not None and state.turn == 5


def test_recovery_holds_for_results_known_only_by_size() -> None:
    """Level ``arguments`` (Claude Code's logs with details): the same four requests with
    the same sizes after a compaction, then the same four again: only the second round is
    the identical requests repeated."""
    reads = [_sized(f"cat f{i}.txt", 10 + i) for i in range(4)]
    once = [*reads, COMPACT, *reads]
    assert session(once) == []
    script = [*reads, reads[0], COMPACT, reads[0], reads[0], reads[0]]  # being repeated before: counts
    dets = session(script)
    assert [(d.turn, d.reason, d.figures.get("evidence_level")) for d in dets] == [
        (8, Reason.FREQUENCY, "arguments")]
    assert [(d.turn, d.reason) for d in session(without_compactions(script))] == [(8, Reason.FREQUENCY)]


def test_failures_are_never_a_recovery() -> None:
    fail = call("Bash", {"command": "make test"}, None, error=True, error_type="ShellError",
                error_message="1 failed")
    script = [fail, fail, COMPACT, fail]
    assert [(d.turn, d.reason) for d in session(script)] == [(3, Reason.ERROR_RECURRENCE)]
    assert [(d.turn, d.reason) for d in session(without_compactions(script))] == [(3, Reason.ERROR_RECURRENCE)]


# -- 2. the loop across a compaction is the same loop ----------------------------------------


@pytest.mark.parametrize("at", [2, 3, 4, 5])
def test_a_loop_going_on_across_a_compaction_is_caught_at_the_same_steps(at: int) -> None:
    cat = _read("notes.txt")
    loop = [cat] * 8
    script = [*loop[:at], COMPACT, *loop[at:]]
    assert brief(session(script)) == brief(session(loop)) == [(2, "repeat_cycle", 1), (4, "repeat_cycle", 2),
                                                              (6, "repeat_cycle", 3)]


def test_an_alternating_loop_going_on_across_a_compaction_is_caught_at_the_same_steps() -> None:
    a, b = _read("a.py"), call("run_tests", {}, "1 failed")
    loop = [a, b] * 6
    script = [*loop[:6], COMPACT, *loop[6:]]
    assert brief(session(script)) == brief(session(loop))


def test_a_loop_known_only_by_size_going_on_across_a_compaction() -> None:
    cat = _sized("cat notes.txt", 31)
    loop = [cat] * 6
    script = [*loop[:3], COMPACT, *loop[3:]]
    expected = [(4, "frequency", 1)]
    assert brief(session(script)) == brief(session(loop)) == expected


def test_a_loop_started_on_the_re_read_gets_that_one_re_read() -> None:
    """A call done once before the compaction is given its re-read: a loop that starts
    there is caught one step later than without the boundary, never missed."""
    cat = _read("notes.txt")
    script = [cat, COMPACT, cat, cat, cat, cat]
    assert brief(session(script))[:1] == [(3, "repeat_cycle", 1)]
    assert brief(session(without_compactions(script)))[:1] == [(2, "repeat_cycle", 1)]


def test_the_boundary_forgets_no_evidence_for_the_no_progress_counter() -> None:
    """Three barren steps before a compaction and a fourth after it: the counter goes on
    across the boundary (the re-read of one of them in between is the expected one)."""
    empty = [call("search", {"q": q}, "0 results") for q in ("a", "b", "c", "d")]
    script = [*empty[:3], COMPACT, empty[0], empty[3]]
    assert [(d.turn, d.reason) for d in session(script)] == [(5, Reason.BARREN)]
    assert [(d.turn, d.reason) for d in session([*empty[:3], empty[3]])] == [(4, Reason.BARREN)]


# -- 3. compactions in a row with nothing new between them -----------------------------------


def test_compactions_with_only_re_reads_between_them_are_a_compaction_livelock() -> None:
    script = [*FILES[:2], COMPACT, *FILES[:2], COMPACT, *FILES[:2], COMPACT, *FILES[:2]]
    dets = session(script, tokens=100)
    assert [(d.turn, d.reason, int(d.level)) for d in dets] == [(6, Reason.COMPACTION_LIVELOCK, 1)]
    det = dets[0]
    assert det.event == "livelock" and det.span_id == "c8" and det.tool == ""
    attributes = det.event_attributes()
    assert attributes["progress.compactions"] == 3 and attributes["progress.steps"] == 4
    assert attributes["progress.tokens_burned"] == 400  # the tokens of the four steps between the three
    assert "progress.evidence_level" not in attributes


def test_compactions_back_to_back_are_a_compaction_livelock_with_their_figures() -> None:
    compact = {"compact": True, "trigger": "auto", "tokens_before": 95_000, "tokens_after": 2_700}
    dets = session([FILES[0], compact, compact, compact])
    assert [(d.turn, d.reason) for d in dets] == [(1, Reason.COMPACTION_LIVELOCK)]
    attributes = dets[0].event_attributes()
    assert attributes["progress.compaction_trigger"] == "auto"
    assert (attributes["progress.tokens_before"], attributes["progress.tokens_after"]) == (95_000, 2_700)
    assert attributes["progress.steps"] == 0


def test_compactions_with_something_new_between_them_are_quiet() -> None:
    script = [FILES[0]]
    for n in range(6):
        script += [COMPACT, FILES[0], _read(f"new{n}.py")]
    assert session(script) == []


@pytest.mark.parametrize("between", [
    call("write_file", {"path": "x", "text": "y"}, "ok"),  # an acknowledged new request: a write
    call("Bash", {"command": "make"}, None, error=True, error_type="ShellError", error_message="failed"),
    call("think", {"note": "x"}, NOT_CAPTURED),  # nothing captured of the result: cannot show nothing new
])
def test_a_step_that_may_be_new_breaks_the_streak(between: dict[str, Any]) -> None:
    script = [FILES[0], COMPACT, FILES[0], COMPACT, between, COMPACT, FILES[0], COMPACT]
    assert not any(d.reason is Reason.COMPACTION_LIVELOCK for d in session(script))


def test_only_sizes_between_the_compactions_the_livelock_says_so() -> None:
    cat, count = _sized("cat notes.txt", 31), _sized("wc -l notes.txt", 12)
    script = [cat, count, COMPACT, cat, count, COMPACT, cat, count, COMPACT]
    dets = session(script)
    assert [(d.turn, d.reason, d.figures.get("evidence_level")) for d in dets] == [
        (6, Reason.COMPACTION_LIVELOCK, "arguments")]
    # a request the run had not sent before, known only by size, may have changed things
    new = [cat, count, COMPACT, cat, count, COMPACT, _sized("make build", 4), COMPACT]
    assert session(new) == []


def test_the_next_livelock_needs_new_compactions() -> None:
    script = [FILES[0]] + [COMPACT, FILES[0]] * 9
    dets = session(script)
    assert [(d.reason, int(d.level)) for d in dets] == [(Reason.COMPACTION_LIVELOCK, 1),
                                                        (Reason.COMPACTION_LIVELOCK, 2),
                                                        (Reason.COMPACTION_LIVELOCK, 3)]
    assert [d.figures["compactions"] for d in dets] == [3, 3, 3]


def test_the_threshold_is_signature_visits() -> None:
    script = [FILES[0], COMPACT, FILES[0], COMPACT, FILES[0], COMPACT]
    assert session(script, Config(signature_visits=4)) == []
    assert [d.reason for d in session([*script, FILES[0], COMPACT], Config(signature_visits=4))] == [
        Reason.COMPACTION_LIVELOCK]


# -- the engine API ---------------------------------------------------------------------------


def test_disabled_the_boundary_is_ignored() -> None:
    config = Config(disabled_signals=frozenset({"compaction"}))
    script = [*FILES, COMPACT, *FILES]
    assert session(script, config) == session(without_compactions(script))
    spiral = [FILES[0]] + [COMPACT, FILES[0]] * 4
    assert not any(d.reason is Reason.COMPACTION_LIVELOCK for d in session(spiral, config))


def test_a_compaction_reported_twice_is_counted_once() -> None:
    engine = ProgressEngine(Config())
    engine.observe(make_calls([FILES[0]])[0], flush=True)
    twice = Compaction(trace_id="t1", time_ns=5 * S, span_id="same")
    assert engine.compaction(twice) == [] and engine.compaction(twice) == []
    assert engine.stats.compactions == 1 and engine.stats.duplicates == 1


def test_calls_started_before_the_compaction_are_steps_before_it() -> None:
    """Buffered calls (the log tracker feeds them unflushed) that started before the
    compaction are evaluated first; one that started after it stays after it."""
    engine = ProgressEngine(Config())
    first, second, third = make_calls([FILES[0], FILES[1], FILES[0]])
    engine.observe(first)
    engine.observe(third)  # started after the compaction, arrived early
    engine.compaction(Compaction(trace_id="t1", time_ns=15 * S, span_id="c"))
    state = engine.run_state("t1", "")
    assert state is not None and state.turn == 1 and [c.span_id for c in state.pending] == [third.span_id]
    engine.observe(second)
    assert engine.flush("t1") == []  # a.py again after the boundary: a recovery, not a repeat
    assert state.turn == 3


def test_a_compaction_of_an_unknown_run_or_odd_values_never_raises() -> None:
    engine = ProgressEngine(Config())
    assert engine.compaction(Compaction(trace_id="nowhere", run_id="r", time_ns=-1)) == []
    assert engine.compaction(Compaction(trace_id="t", tokens_before="x", trigger=3)) == []  # type: ignore[arg-type]
    assert engine.stats.errors == 0
