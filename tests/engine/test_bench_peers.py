"""The engine benchmark's peers (``bench/engine_peers.py``, issue 26): the Pydantic port and
the fingerprint guard see each run apart, on the calls the engine sees, timed in the same
round as the engine; the target table says whether each goal is met."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bench_engine import main, paired_round, real_units, record_replay
from bench.engine_peers import (
    count_stages,
    fingerprint_pass,
    peer_inputs,
    pydantic_pass,
    stage_lines,
    target_table,
)
from otel_progress import Config, ProgressEngine, ToolCall
from otel_progress.service.otlp import span_record
from tests.engine.helpers import as_json, call, make_calls
from tests.service.helpers import loop_trace, progressing_trace


def calls(run: str, n: int, same: bool) -> list[ToolCall]:
    return [ToolCall(name="read", arguments='{"p": 1}' if same else f'{{"p": {i}}}', result=f"r{i}",
                     run_id=run, span_id=f"{run}{i}") for i in range(n)]


def test_each_run_is_seen_apart() -> None:
    # four identical calls in each of two runs: five in the trace, but never five in a run
    mixed = [c for pair in zip(calls("a", 4, True), calls("b", 4, True), strict=True) for c in pair]
    runs = peer_inputs(mixed)
    assert [len(r) for r in runs] == [4, 4] and runs[0][0] == ("read", '{"p": 1}', "r0", False)
    assert pydantic_pass(runs) == 0
    assert pydantic_pass(peer_inputs(calls("a", 5, True))) == 1  # tier 1: five in the window
    assert pydantic_pass(peer_inputs(calls("a", 20, False))) == 0
    assert fingerprint_pass(runs) == 4  # the guard fires at three, then at every repeat
    assert peer_inputs([ToolCall(name="t", run_id="r")]) == [[("t", None, None, False)]]


def test_a_real_round_times_the_peers_beside_the_engine() -> None:
    traces = []
    for spans in (loop_trace(3, turns=6), progressing_trace(4)):
        ops, trace_calls = record_replay([span_record(s) for s in spans])
        traces.append(("src", ops, trace_calls))
    counted: list[int] = []
    times = paired_round(real_units(traces, counted, peers=True))
    assert [len(t) for t in times] == [4, 4] and all(x > 0 for t in times for x in t)
    assert counted == [3, 0]  # the engine's detections are the replay's, peers or not
    assert [len(t) for t in paired_round(real_units(traces, []))] == [2, 2]


def test_the_target_table_says_whether_each_goal_is_met() -> None:
    # per round: engine, floor, Pydantic, fingerprint (seconds for 1,000 calls)
    fast = [(0.030, 0.012, 0.040, 0.004)] * 7
    slow = [(0.130, 0.010, 0.038, 0.014)] * 7
    lines = target_table([("fast", 1000, fast), ("slow", 1000, slow)])
    fast_line, slow_line = lines[2], lines[3]
    assert "30.0µs" in fast_line and "0.75x (met)" in fast_line and "2.5x (met)" in fast_line
    assert "130.0µs" in slow_line and "3.42x (not met)" in slow_line and "13.0x (not met)" in slow_line


def test_stage_counts_count_the_calls_reaching_each_stage() -> None:
    """A new plain-text answer is read once; the same request answered again in other words
    is compared (same_prose); every wrapper is removed afterwards."""
    from otel_progress.evidence import content

    before = content.same_prose
    text = "The service answered that the deployment is still waiting for an approval from the owner"
    other = "The owner has not approved it yet, so the deployment is still waiting for that approval"
    calls = make_calls([call("ask", as_json({"q": "status"}), t) for t in (text, other, text)])

    def feed() -> None:
        engine = ProgressEngine(Config())
        for c in calls:
            engine.observe(c, flush=True)

    counts = count_stages(feed)
    assert counts["request parsed (not a recent text)"] == 1  # (the same argument text thrice)
    assert counts["result: plain text read (not recent)"] == 2
    assert counts["wordings compared (same request)"] >= 1
    assert counts["location views compared"] == 0
    assert content.same_prose is before
    assert "2 calls ( 20.0% of 10)" in "\n".join(stage_lines(counts, 10))


def test_before_must_be_a_checkout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--mode", "real", "--before", str(tmp_path)])
    assert exit_info.value.code == 2 and "not a checkout of otel-progress" in capsys.readouterr().err
