"""Each baseline reproduces the documented test scenarios of its peer (peers.md)."""

from __future__ import annotations

from typing import Any

from bench.quality.baselines import (
    Cline,
    CrewAIRepeatedInput,
    GeminiCLI,
    GooseRep002,
    OpenClaw,
    OpenCode,
    OpenHandsV0,
    OpenHandsV1,
    OpenLIT,
    RooCode,
    StrictRepeat,
    baselines,
)
from bench.quality.corpus import load_corpus, make_run


def call(tool: str, args: Any = None, result: Any = "ok", error: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"call": tool, "args": {} if args is None else args}
    if error is not None:
        entry["error"] = error
    else:
        entry["result"] = result
    return entry


def first(detector, calls, **fields) -> int | None:
    return detector.first_detection(make_run("t", list(calls), **fields))


def alarms(detector, calls) -> list[int]:
    """Every turn at which the detector's monitor raises an alarm (not just the first)."""
    run = make_run("t", list(calls))
    monitor = detector.monitor(run)
    return [s.turn for s in run.steps for c in s.calls if monitor.observe(c) is not None]


# -- the strict check and CrewAI (seed 002, peers.md §8) -------------------------------------

S = call("search_tickets", {"q": "refund delay"}, "3 tickets: 811, 812, 840")
A = call("get_order", {"id": 123}, '{"status": "shipped"}')
B = call("get_shipment", {"id": 123}, '{"eta": "Friday"}')


def test_strict_seed002_examples() -> None:
    assert first(StrictRepeat(), [S, S, S]) == 2
    assert first(StrictRepeat(), [A, B, A, B, A, B]) is None  # the 17 alternating runs
    reordered = [call("get_order", {"id": 123, "full": True}), call("get_order", {"full": True, "id": 123})]
    assert first(StrictRepeat(), reordered) is None  # raw-string comparison
    timeout = call("get_order", {"id": 123}, error="timed out after 5 s")
    assert first(StrictRepeat(), [timeout, A]) == 2  # the 9 healthy retries it stopped


def test_crewai_refuses_the_immediately_repeated_input() -> None:
    assert first(CrewAIRepeatedInput(), [A, A]) == 2
    assert first(CrewAIRepeatedInput(), [call("f", {"a": 1, "b": 2}), call("f", {"b": 2, "a": 1})]) == 2
    assert first(CrewAIRepeatedInput(), [A, B, A]) is None


# -- OpenHands V0 (peers.md §1, tests/unit/controller/test_is_stuck.py) ---------------------

LS_EMPTY = call("execute_bash", {"command": "ls"}, "")


def test_openhands_v0_repeating_action_observation() -> None:
    assert first(OpenHandsV0(), [LS_EMPTY] * 3) is None
    run = make_run("t", [LS_EMPTY] * 4)
    alarm = OpenHandsV0().first_alarm(run)
    assert alarm is not None and alarm.turn == 4 and "repeating_action_observation" in alarm.detail


def test_openhands_v0_repeating_action_error_with_differing_texts() -> None:
    texts = ["Command not found", "Command still not found or another error", "Different error"]
    calls = [call("str_replace_editor", {"command": "invalid_command"}, error=t) for t in texts]
    alarm = OpenHandsV0().first_alarm(make_run("t", calls))
    assert alarm is not None and alarm.turn == 3 and "repeating_action_error" in alarm.detail


def test_openhands_v0_syntax_error_same_line_vs_random_lines() -> None:
    code = {"code": "edit_file_by_replace('a.py',\n to_replace='x',\n new_content='y'"}
    same = [call("execute_ipython_cell", code, error="Cell In[1], line 42: SyntaxError: invalid syntax."
                 " Perhaps you forgot a comma?")] * 3
    assert first(OpenHandsV0(), same) == 3
    moving = [call("execute_ipython_cell", code, error=f"Cell In[1], line {n}: SyntaxError: invalid syntax."
                   " Perhaps you forgot a comma?") for n in (10, 20, 30, 40)]
    assert first(OpenHandsV0(), moving) is None


def test_openhands_v0_ab_pattern_needs_three_cycles() -> None:
    ls = call("execute_bash", {"command": "ls"}, "file1.txt\nfile2.txt")
    read = call("read", {"path": "file1.txt"}, "File content")
    alarm = OpenHandsV0().first_alarm(make_run("t", [ls, read] * 3))
    assert alarm is not None and alarm.turn == 6 and "pattern" in alarm.detail
    pwd = call("execute_bash", {"command": "pwd"}, "/home/user")
    read2 = call("read", {"path": "file2.txt"}, "Another file content")
    assert first(OpenHandsV0(), [ls, read, pwd, read2, pwd, read2]) is None


def test_openhands_v0_polling_false_positive() -> None:
    polls = [call("execute_bash", {"command": "sleep 60; tail build.log"}, f"step {i}") for i in range(4)]
    assert first(OpenHandsV0(), polls) == 4  # #5355: output ignored for shell observations


# -- OpenHands V1 SDK (peers.md §1b, tests/cross/test_stuck_detector.py) --------------------


def test_openhands_v1_scenarios() -> None:
    ls = call("terminal", {"command": "ls"}, "file1.txt\nfile2.txt")
    assert first(OpenHandsV1(), [ls] * 3) is None
    assert first(OpenHandsV1(), [ls] * 4) == 4
    bad = call("str_replace_editor", {"command": "invalid_command"}, error="Command 'invalid_command' not found")
    assert first(OpenHandsV1(), [bad] * 2) is None
    nudge = OpenHandsV1().first_alarm(make_run("t", [bad] * 3))
    assert nudge is not None and nudge.turn == 3 and "nudge" in nudge.detail and "str_replace_editor" in nudge.detail
    distinct = [call("terminal", {"command": c}, c.upper()) for c in ("ls", "pwd", "whoami", "date")]
    assert first(OpenHandsV1(), distinct) is None
    polls = [call("terminal", {"command": "sleep 60; tail build.log"}, f"step {i}") for i in range(6)]
    assert first(OpenHandsV1(), polls) is None  # full observation equality
    assert first(OpenHandsV1(action_observation=6), [ls] * 4) is None
    assert first(OpenHandsV1(action_observation=6), [ls] * 6) == 6


# -- Gemini CLI (peers.md §2, loopDetectionService.test.ts) --------------------------------

T = call("testTool", {"param": "value"})


def test_gemini_tool_call_tier() -> None:
    assert first(GeminiCLI(), [T] * 4) is None
    assert first(GeminiCLI(), [T] * 5) == 5
    assert alarms(GeminiCLI(), [T] * 6)[0] == 5
    mixed = [call("testTool", {"param": "value1"}), call("testTool", {"param": "value2"}),
             call("anotherTool", {"param": "value1"})] * 3
    assert first(GeminiCLI(), mixed) is None
    ab = [call("read_file", {"file_path": f"loop_{x}.txt"}) for x in "ab"] * 8
    assert first(GeminiCLI(), ab[:15]) == 10
    abc = [call("t", {"id": x}) for x in "abc"] * 7
    assert first(GeminiCLI(), abc[:20]) == 15
    five = [call("t", {"id": i}) for i in range(1, 6)] * 6
    assert first(GeminiCLI(), five) == 25
    a, b, c = call("t", {"x": "A"}), call("t", {"x": "B"}), call("t", {"x": "C"})
    assert first(GeminiCLI(), [a, b, a, b, c, a, b, a, b]) is None


# -- Roo Code (peers.md §3a, ToolRepetitionDetector.spec.ts) --------------------------------


def test_roo_code_spec() -> None:
    tool = call("tool")
    assert first(RooCode(), [tool] * 3) is None
    assert first(RooCode(), [tool] * 4) == 4
    assert first(RooCode(limit=2), [tool] * 3) == 3
    assert first(RooCode(), [call("first"), call("second"), call("third")]) is None
    assert first(RooCode(limit=2), [call("same"), call("different"), call("same")]) is None
    assert alarms(RooCode(limit=2), [call("problem")] * 6) == [3, 6]  # the state resets after a block
    orders = [call("t", {"a": "1", "b": "2", "c": "3"}), call("t", {"c": "3", "a": "1", "b": "2"}),
              call("t", {"b": "2", "c": "3", "a": "1"})]
    assert first(RooCode(limit=2), orders) == 3
    assert first(RooCode(limit=1), [tool] * 2) == 2
    assert first(RooCode(limit=5), [tool] * 6) == 6
    assert first(RooCode(limit=0), [tool] * 20) is None
    reads = [call("read_file", {"files": [f"file{i % 2}"]}) for i in range(6)]
    assert first(RooCode(limit=2), reads) is None


# -- Cline (peers.md §3c, loop-detection.test.ts) -------------------------------------------


def test_cline_scenarios() -> None:
    read = call("read_file", {"path": "src/main.ts"})
    assert alarms(Cline(), [read] * 5) == [3, 5]
    assert first(Cline(), [call("t", {"b": "2", "a": "1"}), call("t", {"a": "1", "b": "2"}),
                           call("t", {"a": "1", "b": "2"})]) == 3
    a, b = call("read_file", {"path": "a.ts"}), call("read_file", {"path": "b.ts"})
    assert first(Cline(), [a, a, b, b, call("list_files", {"path": "b.ts"})]) is None
    same = [call(t, {"path": "x"}) for t in ("read_file", "search_files", "list_files")]
    assert first(Cline(), same) is None
    progress = [call("read_file", {"path": "src/index.ts", "task_progress": f"step {i} of 5"}) for i in range(5)]
    assert alarms(Cline(), progress) == [3, 5]


# -- OpenCode (peers.md §5) ------------------------------------------------------------------


def test_opencode_doom_loop() -> None:
    grep = call("grep", {"pattern": "TODO", "path": "src"})
    assert first(OpenCode(), [grep] * 2) is None
    assert first(OpenCode(), [grep] * 3) == 3
    swapped = [call("grep", {"pattern": "TODO", "path": "src"}), call("grep", {"path": "src", "pattern": "TODO"})]
    assert first(OpenCode(), swapped * 2) is None  # JSON.stringify is key-order sensitive


# -- Goose REP-002 (peers.md §4, repetition_inspector_tests.rs) -----------------------------


def test_goose_rep002() -> None:
    err = call("my_tool", error="404 Not Found")
    alarm = GooseRep002().first_alarm(make_run("t", [err, err, err, call("my_tool")]))
    assert alarm is not None and alarm.turn == 4 and "REP-002" in alarm.detail
    assert first(GooseRep002(), [err, err, call("my_tool")]) is None
    assert first(GooseRep002(), [err, err, call("other", result="ok"), err, call("my_tool")]) is None
    assert first(GooseRep002(), [err, err, err, call("tool_b")]) is None
    varying = [call("fetch_user", {"id": i}, error="404 Not Found") for i in range(5)]
    assert first(GooseRep002(), varying) == 4  # varying arguments, the same error


# -- OpenClaw (peers.md §6, tool-loop-detection.test.ts) -----------------------------------


def test_openclaw_scenarios() -> None:
    read = call("read", {"path": "same.txt"}, "same output")
    assert first(OpenClaw(), [read] * 10) is None
    alarm = OpenClaw().first_alarm(make_run("t", [read] * 11))
    assert alarm is not None and alarm.turn == 11 and "generic_repeat" in alarm.detail
    assert first(OpenClaw(), [call("read", {"path": f"f{i}.txt"}) for i in range(15)]) is None
    poll = call("process", {"action": "poll", "sessionId": "s1"}, {"status": "running", "output": "(no new output)"})
    alarm = OpenClaw().first_alarm(make_run("t", [poll] * 11))
    assert alarm is not None and "known_poll_no_progress" in alarm.detail
    moving = [call("process", {"action": "poll", "sessionId": "s1"}, {"status": "running", "output": f"line {i}"})
              for i in range(25)]
    assert first(OpenClaw(), moving) is None
    ping = [call("read", {"path": "a"}, "A"), call("list", {"dir": "workspace"}, "W")] * 5
    alarm = OpenClaw().first_alarm(make_run("t", ping))
    assert alarm is not None and alarm.turn == 10 and "ping_pong" in alarm.detail
    unknown = [call("exec", {"command": f"c{i}"}, error="Tool exec not found") for i in range(11)]
    assert first(OpenClaw(), unknown[:10]) is None
    alarm = OpenClaw().first_alarm(make_run("t", unknown))
    assert alarm is not None and "unknown_tool_repeat" in alarm.detail
    ticks = [call("exec", {"command": "date"}, f"tick {i}") for i in range(30)]
    alarm = OpenClaw().first_alarm(make_run("t", ticks))
    assert alarm is not None and alarm.detail.startswith("warning")


# -- OpenLIT (peers.md §9) -------------------------------------------------------------------


def test_openlit_trace_flag() -> None:
    q = call("search", {"q": "auth"})
    other = call("read", {"path": "x"})
    assert first(OpenLIT(), [q, other, q, other, q]) == 5  # three occurrences, not consecutive
    assert first(OpenLIT(), [q, other, q]) is None
    assert first(OpenLIT(), [q] * 5, capture=False) is None  # no arguments on the spans
    assert first(OpenLIT(), [call("ping")] * 5) is None  # empty arguments are ignored


def test_sub_agents_start_fresh_except_for_trace_side_tools() -> None:
    lap = [call("plan", {"n": 1}, "p"), {**call("extract", {"doc": "d"}, "none"), "agent": "extractor"}]
    turns = [call("start", {}, "s")] + [dict(lap[0], args={"n": i}) if k == 0 else lap[1]
                                        for i in range(5) for k in range(2)]
    run = make_run("t", turns)
    assert len(run.invocations()) == 6
    assert OpenCode().first_detection(run) is None  # each extractor sees one call
    assert OpenLIT().first_detection(run) == 7  # the trace sees the third extract


def test_every_baseline_runs_on_the_corpus() -> None:
    runs = load_corpus()
    for detector in baselines():
        results = detector.evaluate(runs)
        assert set(results) == {r.id for r in runs}
        assert detector.title and detector.source and detector.name
