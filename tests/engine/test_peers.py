"""The failure modes of peers.md §10 as labelled scenarios: the false alarms users
reported must not fire; the loops peers missed must fire, at a stated turn."""

from __future__ import annotations

import pytest

from otel_progress import Config, Reason

from .helpers import as_json, brief, call, manifest_config, run

# --- false positives: legitimate repetition --------------------------------------------


def test_openhands_5355_waiting_on_a_long_running_process() -> None:
    # `sleep 60; tail log` while a build runs: the log tail changes each time.
    seq = [call("terminal", {"command": "sleep 60; tail -n 5 build.log"}, f"[{i * 60}s] compiling module {i}")
           for i in range(10)]
    assert run(seq, gap=60) == []


def test_software_agent_sdk_762_poll_every_5_minutes_for_15_minutes() -> None:
    seq = [call("check_job", {"job": "train-7"}, as_json({"state": "RUNNING", "epoch": 3}))] * 4
    seq.append(call("check_job", {"job": "train-7"}, as_json({"state": "SUCCEEDED", "epoch": 4})))
    assert run(seq, gap=300) == []


def test_openhands_pr_10750_empty_wait_commands_with_new_output() -> None:
    seq = [call("terminal", {"command": ""}, f"Downloading layer {i}/12") for i in range(12)]
    assert run(seq) == []


def test_openclaw_16808_result_aware_poll_with_changing_output() -> None:
    seq = [call("process", {"action": "poll", "sessionId": "s1"}, f"line {i}") for i in range(25)]
    assert run(seq) == []


def test_qwen_9450_task_list_polling_while_peers_complete_tasks() -> None:
    seq = [call("task_list", {}, as_json({"open": 10 - i, "done": i})) for i in range(10)]
    assert run(seq) == []


def test_roo_9502_paging_mcp_read_output_each_new_data() -> None:
    seq = [call("read_output", {"session": "x"}, f"chunk {i}: " + "data " * 100) for i in range(50)]
    assert run(seq) == []


@pytest.mark.parametrize("count", [16, 40])
def test_batch_work_many_distinct_file_reads(count: int) -> None:
    # gemini-cli #5873/#7950/#8234, gsd-pi #1067 (16th distinct read), qwen PR #3236.
    seq = [call("read_file", {"path": f"src/mod_{i}.py"}, f"# module {i}\ncontent {i}") for i in range(count)]
    assert run(seq) == []


def test_batch_edits_across_files_with_identical_acknowledgements() -> None:
    # File move & import update: every edit returns "ok", each to another file.
    seq = []
    for i in range(12):
        seq.append(call("edit_file", {"path": f"pkg/m{i}.py", "old": "from a import x", "new": "from b import x"},
                        "ok", state=f"tree-{i}"))
    assert run(seq, manifest_config()) == []


def test_roo_5879_serializer_bug_distinct_native_args_are_distinct_calls() -> None:
    seq = [call("read_file", {"nativeArgs": {"files": [f"f{i}.txt"]}}, f"content {i}") for i in range(6)]
    assert run(seq) == []


def test_ggcode_49_edit_sequence_a_b_c_d_is_not_oscillation() -> None:
    seq = [call("edit_file", {"path": "x.py", "patch": p}, "ok", state=f"tree-{p}") for p in "ABCD"]
    assert run(seq, manifest_config()) == []


def test_fak_3943_lone_revert_is_not_flagged() -> None:
    seq = [
        call("read_file", {"path": "x.py"}, "v0", state="tree-0"),
        call("edit_file", {"path": "x.py", "patch": "bad"}, "ok", state="tree-1"),
        call("run_tests", {}, "2 failed", state="tree-1"),
        call("edit_file", {"path": "x.py", "patch": "revert"}, "ok", state="tree-0"),
        call("edit_file", {"path": "x.py", "patch": "good"}, "ok", state="tree-2"),
        call("run_tests", {}, "all passed", state="tree-2"),
    ]
    assert run(seq, manifest_config()) == []


def test_retry_after_timeout_that_worked() -> None:
    seq = [
        call("http_get", {"url": "/orders/9"}, None, error=True, error_type="TimeoutError", error_message="timed out"),
        call("http_get", {"url": "/orders/9"}, as_json({"id": 9, "status": "shipped"})),
    ]
    assert run(seq) == []


def test_rerunning_tests_after_each_change_is_progress() -> None:
    seq = []
    for i in range(6):
        seq.append(call("edit_file", {"path": "x.py", "patch": f"fix {i}"}, "ok"))
        seq.append(call("run_tests", {}, f"{6 - i} failed"))
    assert run(seq) == []


def test_reading_config_after_each_of_three_edits() -> None:
    seq = []
    for i in range(3):
        seq.append(call("edit_file", {"path": "config.yaml", "patch": f"key{i}"}, "ok"))
        seq.append(call("read_file", {"path": "config.yaml"}, f"key0..key{i}"))
    assert run(seq) == []


def test_open_octo_795_observation_tools_with_changing_results() -> None:
    seq = [call("get_current_datetime", {}, f"2026-03-17 is day {i}") for i in range(5)]
    assert run(seq) == []


# --- misses: loops that evade exact matching ---------------------------------------------


def test_sentry_120620_rephrased_searches_returning_the_same_docs() -> None:
    docs = as_json({"hits": [{"title": "Configuring auth"}, {"title": "Auth FAQ"}]})
    seq = [call("search_docs", {"q": q}, docs) for q in
           ("how do I configure auth", "configure auth", "auth configuration", "setting up authentication",
            "auth config docs")]
    dets = run(seq)
    assert dets, "rephrased searches returning the same documents must be caught"
    # The first answer was new; four rephrasings in a row brought nothing more.
    assert dets[0].turn == 5 and dets[0].reason is Reason.BARREN


def test_goose_8994_404_with_different_ids() -> None:
    seq = [call("get_issue", {"id": 4000 + i}, None, error=True, error_type="HTTPError",
                error_message=f"404 Not Found: issue {4000 + i}") for i in range(5)]
    assert brief(run(seq))[:1] == [(3, "signature_repeat", 1)]


def test_openclaw_117637_varying_commands_same_missing_path() -> None:
    seq = [call("exec", {"command": f"python read.py /data/x.csv --head {i}"}, None, error=True,
                error_type="ExecError", error_message="FileNotFoundError: /data/x.csv") for i in range(8)]
    assert brief(run(seq))[:1] == [(5, "error_recurrence", 1)]


def test_qwen_10887_repeated_git_remote_exit_128() -> None:
    seq = [call("shell", {"command": "git remote -v"}, "fatal: not a git repository (exit 128)")] * 5
    # a command re-issued once is a re-check; the third identical answer is the loop (issue 25)
    assert brief(run(seq))[:1] == [(3, "repeat_cycle", 1)]


def test_stella_4034_paging_one_file_wraps_to_the_start() -> None:
    pages = 5
    seq = [call("read_file", {"path": "big.log", "offset": 40 * (i % pages), "limit": 40},
                f"lines {40 * (i % pages)}-{40 * (i % pages) + 39}") for i in range(30)]
    dets = run(seq)
    # Lap two brings only pages already read: the third place arrived at again in a row
    # with nothing new there is a location revisit (turn 8), one turn before four barren
    # steps and two before the second lap completes the period-5 cycle.
    assert brief(dets)[:1] == [(8, "state_revisit", 1)]


def test_everruns_2295_alternating_offset_cycle() -> None:
    seq = [call("read_file", {"path": "a.py", "offset": (i % 2) * 100}, f"chunk {(i % 2)}") for i in range(8)]
    assert brief(run(seq))[:1] == [(4, "repeat_cycle", 1)]


def test_goose_5155_parameter_creep_with_the_same_result() -> None:
    seq = [call("analyze", {"path": ".", "max_depth": d}, "tree: src/ tests/ docs/") for d in range(2, 10)]
    dets = run(seq)
    assert dets and dets[0].reason is Reason.BARREN and dets[0].turn == 5


def test_copilot_for_xcode_402_follow_up_reverts_previous_change() -> None:
    seq = []
    for _ in range(3):
        seq.append(call("edit_file", {"path": "View.swift", "patch": "use VStack"}, "ok", state="tree-A"))
        seq.append(call("edit_file", {"path": "View.swift", "patch": "use HStack"}, "ok", state="tree-B"))
    dets = run(seq, manifest_config())
    assert dets and dets[0].turn <= 4


def test_openhands_7960_install_build_alternation() -> None:
    seq = [call("terminal", {"command": "pip install -e ."}, "Successfully installed pkg-0.1"),
           call("terminal", {"command": "make build"}, "error: missing header foo.h")] * 4
    assert brief(run(seq))[:1] == [(4, "repeat_cycle", 1)]


def test_cogtrix_474_successful_but_useless_clock_reads() -> None:
    seq = [call("get_current_datetime", {}, f"2026-03-17T09:12:{10 + i:02d}Z") for i in range(33)]
    dets = run(seq)
    assert dets and dets[0].turn == 2


def test_goose_9136_identical_calls_inside_one_model_response() -> None:
    # Five identical `mvn test` calls issued in parallel by one response (one step).
    seq = [call("shell", {"command": "mvn test"}, "BUILD FAILURE", t=0.0, duration=30.0, parent_id="resp-1")
           for _ in range(5)]
    dets = run(seq)
    assert brief(dets) == [(1, "frequency", 1)]


def test_hermes_481_same_read_key_repeated() -> None:
    seq = [call("read_file", {"path": "a.md", "offset": 0, "limit": 200}, "same text")] * 4
    assert brief(run(seq))[:1] == [(2, "repeat_cycle", 1)]


def test_cline_9916_reading_project_management_md_in_a_loop_with_other_calls_between() -> None:
    seq = []
    for i in range(4):
        seq.append(call("read_file", {"path": "project_management.md"}, "# Plan\n- [ ] task 1"))
        seq.append(call("list_files", {"path": f"dir{i}"}, f"file_{i}.txt"))
    dets = run(seq)
    assert dets and dets[0].reason in (Reason.FREQUENCY, Reason.SIGNATURE_REPEAT, Reason.SAME_ANSWER)
    assert dets[0].turn <= 7


def test_content_capture_off_never_compares_names_alone() -> None:
    from otel_progress import NOT_CAPTURED

    seq = [call("search", NOT_CAPTURED, NOT_CAPTURED) for _ in range(12)]
    assert run(seq) == []


def test_thresholds_are_configurable() -> None:
    docs = [call("search_docs", {"q": f"q{i}"}, "0 results") for i in range(6)]
    assert brief(run(docs, Config(barren_threshold=6))) == [(6, "barren", 1)]
    assert run(docs, Config(disabled_signals=frozenset({"barren"}))) == []
