"""The port of Pydantic AI Harness's ``LoopDetection`` fires on each of its documented rules
at the documented defaults, and stays quiet on varied calls; the fingerprint guard too."""

from __future__ import annotations

from typing import Any

from bench.quality.baselines import FingerprintGuard, PydanticLoopDetection, baselines
from bench.quality.baselines.pydantic_ai import Fingerprint, LoopDetectionPort, fingerprint
from bench.quality.corpus import make_run


def call(tool: str, args: Any, result: Any = "ok", error: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"call": tool, "args": args}
    if error is not None:
        entry["error"] = error
    else:
        entry["result"] = result
    return entry


def first(calls: list[dict[str, Any]]) -> int | None:
    return PydanticLoopDetection().first_detection(make_run("t", calls))


def detail(calls: list[dict[str, Any]]) -> str:
    alarm = PydanticLoopDetection().first_alarm(make_run("t", calls))
    assert alarm is not None
    return alarm.detail


def test_exact_repetition_five_in_a_window_of_ten() -> None:
    same = [call("read_file", {"path": "a.py"}, f"version {i}") for i in range(5)]  # results differ
    assert first(same[:4]) is None
    assert first(same) == 5 and detail(same).startswith("exact_repetition")
    # interleaved with other calls, still within the last ten
    mixed = [c for i, s in enumerate(same) for c in (s, call("ls", {"dir": str(i)}, str(i)))]
    assert first(mixed) == 9
    # spread over more than ten calls: never five in the window
    spread = [c for i, s in enumerate(same) for c in (s, *(call("ls", {"d": f"{i}{k}"}, "x") for k in range(2)))]
    assert first(spread) is None


def test_arguments_are_canonical_json() -> None:
    assert fingerprint("f", {"a": 1, "b": 2}) == fingerprint("f", {"b": 2, "a": 1}) == fingerprint("f", '{"b":2,"a":1}')
    assert fingerprint("f", "not json") == "f(not json)" and fingerprint("f", None) == "f()"
    reordered = [call("f", {"a": 1, "b": 2} if i % 2 else {"b": 2, "a": 1}, str(i)) for i in range(5)]
    assert first(reordered) == 5


def test_error_cycle_three_identical_results_in_a_row() -> None:
    fail = call("run_tests", {"k": "x"}, "FAILED test_x")
    assert first([fail, fail]) is None
    assert first([fail] * 3) == 3 and detail([fail] * 3).startswith("error_cycle")
    # the same result broken by another call: the streak restarts
    assert first([fail, fail, call("ls", {}, "a"), fail, fail]) is None
    # a tool that raised never reaches the result check
    raised = call("run_tests", {"k": "x"}, error="Traceback: boom")
    assert first([raised] * 4) is None and first([raised] * 5) == 5


def test_alternation_three_full_cycles() -> None:
    a = [call("edit", {"path": "a.py"}, f"edited {i}") for i in range(3)]
    b = [call("view", {"path": "a.py"}, f"content {i}") for i in range(3)]
    cycle = [a[0], b[0], a[1], b[1], a[2], b[2]]
    assert first(cycle[:5]) is None
    assert first(cycle) == 6 and detail(cycle).startswith("alternation")
    # one call six times is no alternation (tier 1 kept out of the way)
    port = LoopDetectionPort(repeat_threshold=99)
    assert [port.step([("edit", {"p": 1}, str(i), False)]) for i in range(6)] == [None] * 6


def test_quiet_on_varied_calls() -> None:
    varied = [call("read_file", {"path": f"f{i}.py"}, f"content {i}") for i in range(40)]
    assert first(varied) is None
    assert FingerprintGuard().first_detection(make_run("t", varied)) is None


def test_a_tier_resets_once_fired() -> None:
    port = LoopDetectionPort()
    hits = [port.step([("read", {"p": 1}, str(i), False)]) for i in range(10)]
    assert [i + 1 for i, h in enumerate(hits) if h is not None] == [5, 10]


def test_monologue_tier() -> None:
    port = LoopDetectionPort()
    assert port.text_response("I will now   check the file.") is None
    assert port.text_response("i will now check the FILE.") is None
    assert port.text_response("") is None  # no text: not a monologue, not a break
    assert LoopDetectionPort().text_response("x") is None
    varied = LoopDetectionPort()
    assert [varied.text_response(t) for t in ("a", "b", "c", "d")] == [None] * 4
    hit = port.text_response("I will now check the file.")
    assert hit is not None and hit.tier == "monologue" and hit.count == 3
    port.text_response("Again.")
    port.text_response("Again.")
    port.response([("ls", {})])  # a response with a tool call breaks the streak
    assert port.text_response("Again.") is None


def test_fingerprint_guard_counts_raw_arguments_over_the_run() -> None:
    guard = Fingerprint()
    assert guard.observe("f", '{"a":1}') is None
    assert guard.observe("g", '{"a":1}') is None
    assert guard.observe("f", '{"a": 1}') is None  # another text: another fingerprint
    assert guard.observe("f", '{"a":1}') is None
    assert guard.observe("f", '{"a":1}') == 3
    calls = [call("f", {"a": 1}, str(i)) for i in range(3)]
    assert FingerprintGuard().first_detection(make_run("t", calls)) == 3


def test_the_port_is_in_the_peer_comparison() -> None:
    assert any(isinstance(d, PydanticLoopDetection) for d in baselines())
