"""The Codex CLI log reader (otel_progress.conventions.logs.agents.codex) on records shaped as Codex
0.171.0 exports them (attribute values copied from a captured ``codex exec`` run: strings
for booleans and counts, an empty body, ``timeUnixNano`` 0)."""

from __future__ import annotations

from typing import Any

from otel_progress.conventions.logs import EVIDENCE_ARGUMENTS, EVIDENCE_FULL, LogRecordView, read_log
from otel_progress.conventions.logs.agents.codex import PREVIEW_TRUNCATED, normalise_output

CONV = "01a23123-0da7-7c22-a738-78a1aeb87405"


def _output(chunk: str, wall: str, code: int, text: str) -> str:
    return (f"Chunk ID: {chunk}\nWall time: {wall} seconds\nProcess exited with code {code}\n"
            f"Original token count: 16\nOutput:\n{text}")


def _tool(output: str, index: int = 0, **extra: Any) -> LogRecordView:
    attributes = {
        "event.name": "codex.tool_result", "tool_result_seq": str(index + 1), "tool_name": "exec_command",
        "call_id": f"call_{index:03d}", "duration_ms": "261", "success": "true", "output_truncated": False,
        "arguments": '{"cmd": "cat notes.txt"}', "output": output,
        "event.timestamp": f"2026-12-01T10:25:1{index}.980Z", "conversation.id": CONV,
    }
    attributes.update(extra)
    return LogRecordView(time_ns=1796120710980189619 + index, observed_ns=1796120710980189619 + index,
                         event_name="codex.tool_result", attributes=attributes, index=index)


def test_identical_results_give_identical_strings_whatever_the_chunk_id_and_wall_time() -> None:
    a = read_log(_tool(_output("5a4dcc", "0.0893", 0, "hello\n"), 0))
    b = read_log(_tool(_output("21055b", "0.3758", 0, "hello\n"), 1))
    assert a is not None and b is not None and a.call is not None and b.call is not None
    assert a.call.result == b.call.result
    assert "Chunk ID" not in a.call.result and "Wall time" not in a.call.result
    assert a.call.arguments == {"cmd": "cat notes.txt"}
    assert a.run_key == b.run_key == f"codex|{CONV}"
    assert a.order < b.order
    assert a.call.evidence_level == EVIDENCE_FULL and not a.call.error
    different = read_log(_tool(_output("a7599a", "0.0000", 0, "hello again\n"), 2))
    assert different is not None and different.call is not None and different.call.result != a.call.result


def test_a_nonzero_exit_logged_as_success_is_a_failure_with_the_output_as_message() -> None:
    obs = read_log(_tool(_output("5a4dcc", "0.0893", 2, "ls: cannot access 'x': No such file\n")))
    assert obs is not None and obs.call is not None
    assert obs.call.error and obs.call.error_type == "nonzero_exit"
    assert obs.call.error_message == "ls: cannot access 'x': No such file\n"
    failed = read_log(_tool("apply_patch verification failed: no such file", success="false"))
    assert failed is not None and failed.call is not None and failed.call.error_type == "tool_error"


def test_a_cut_preview_is_arguments_evidence_and_never_full() -> None:
    cut = _output("5a4dcc", "0.0893", 0, "line\n" * 60) + "\n" + PREVIEW_TRUNCATED
    obs = read_log(_tool(cut))
    assert obs is not None and obs.call is not None
    assert obs.evidence_level == EVIDENCE_ARGUMENTS == obs.call.evidence_level
    assert obs.call.result_truncated
    flagged = read_log(_tool(_output("5a4dcc", "0.0893", 0, "x\n"), output_truncated="true"))
    assert flagged is not None and flagged.call is not None and flagged.call.result_truncated


def test_tokens_come_from_the_completed_response_with_counts_only() -> None:
    base = {"event.name": "codex.sse_event", "event.kind": "response.completed", "conversation.id": CONV,
            "event.timestamp": "2026-12-01T10:25:10.715Z"}
    counted = LogRecordView(event_name="codex.sse_event", attributes={
        **base, "input_token_count": "1200", "output_token_count": "40", "cached_token_count": "0"})
    obs = read_log(counted)
    assert obs is not None and obs.kind == "tokens" and obs.tokens == 1240
    assert obs.input_tokens == 1200  # (the context the model read: cached tokens are part of it)
    assert read_log(LogRecordView(event_name="codex.sse_event", attributes={**base, "duration_ms": "0"})) is None
    other = {**base, "event.kind": "response.output_item.done", "input_token_count": "5"}
    assert read_log(LogRecordView(event_name="codex.sse_event", attributes=other)) is None


def test_odd_records_are_not_read_and_nothing_raises() -> None:
    assert read_log(LogRecordView(event_name="codex.tool_result", attributes={"tool_name": "x"})) is None
    odd = {"event.name": "codex.tool_result", "conversation.id": CONV, "tool_name": ["x"], "output": 3}
    assert read_log(LogRecordView(event_name="codex.tool_result", attributes=odd)) is None
    weird = {"conversation.id": CONV, "tool_name": "t", "output": None, "arguments": "{not json",
             "success": 7, "event.timestamp": "yesterday", "duration_ms": "-5"}
    obs = read_log(LogRecordView(event_name="codex.tool_result", attributes=weird))
    assert obs is not None and obs.call is not None and obs.call.arguments == "{not json"
    assert normalise_output("plain text") == "plain text"


def test_a_record_under_codex_s_source_location_event_name_is_read_by_its_event_name_attribute() -> None:
    record = _tool(_output("5a4dcc", "0.0893", 0, "hello\n"))
    record.event_name = "event otel/src/tool_result.rs:54"  # Codex's OTLP eventName field
    obs = read_log(record)
    assert obs is not None and obs.call is not None and obs.call.name == "exec_command"


def test_without_an_output_the_evidence_is_arguments_and_without_arguments_names() -> None:
    record = _tool("x")
    record.attributes = {k: v for k, v in record.attributes.items() if k != "output"}
    obs = read_log(record)
    assert obs is not None and obs.evidence_level == "arguments"
    record.attributes = {k: v for k, v in record.attributes.items() if k != "arguments"}
    obs = read_log(record)
    assert obs is not None and obs.evidence_level == "names"


def test_a_process_still_running_is_a_poll_with_a_waiting_status() -> None:
    running = "Chunk ID: 07acea\nWall time: 5.0019 seconds\nProcess running with session ID 55249\n" \
              "Original token count: 2\nOutput:\n500/700\n"
    obs = read_log(_tool(running, tool_name="write_stdin", arguments='{"session_id": 55249, "chars": ""}'))
    assert obs is not None and obs.call is not None
    assert obs.call.result == {"status": "running", "output": "500/700\n"} and not obs.call.error


def test_a_refused_call_is_read_from_its_tool_result_as_a_call_that_never_ran() -> None:
    # codex-rs: the approval step runs inside the handler log_tool_result_with_tags wraps, so a
    # denied exec is a tool_result with success "false" and the refusal as its output
    for output in ("exec command rejected by user", "patch rejected by user",
                   "This action was rejected due to unacceptable risk. Reason: deletes the repository",
                   "`rm -rf build` rejected: policy forbids commands starting with `rm`",
                   # unified exec wraps it (0.171.0, tests/coding_agents/test_codex_refusals.py)
                   'exec_command failed: CreateProcess { message: "Rejected(\\"`/bin/bash -lc \'cat notes.txt\'` '
                   'rejected: policy forbids commands starting with `cat`\\")" }'):
        obs = read_log(_tool(output, success="false", duration_ms="0"))
        assert obs is not None and obs.call is not None, output
        call = obs.call
        assert call.executed is False and call.error, output
        assert call.name == "exec_command" and call.arguments == {"cmd": "cat notes.txt"}
        assert call.call_id == "call_000"


def test_a_failure_that_names_a_refusal_in_its_output_still_ran() -> None:
    ran = read_log(_tool(_output("1a2b3c", "0.0001", 1, "exec command rejected by user"), success="true"))
    assert ran is not None and ran.call is not None and ran.call.executed and ran.call.error
    failed = read_log(_tool("rejected by user, and then some", success="false"))
    assert failed is not None and failed.call is not None and failed.call.executed
    spawn = read_log(_tool('exec_command failed: CreateProcess { message: "No such file or directory" }',
                           success="false"))
    assert spawn is not None and spawn.call is not None and spawn.call.executed


def test_a_decision_record_is_not_a_call_its_tool_result_is() -> None:
    decision = LogRecordView(time_ns=0, observed_ns=1796120710980189619, event_name="codex.tool_decision",
                             attributes={"event.name": "codex.tool_decision", "tool_name": "exec_command",
                                         "tool_namespace": "functions", "call_id": "call_000", "decision": "denied",
                                         "source": "user", "event.timestamp": "2026-12-01T10:31:14.946Z",
                                         "conversation.id": CONV})
    assert read_log(decision) is None
