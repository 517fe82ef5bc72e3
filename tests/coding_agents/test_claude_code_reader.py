"""The Claude Code log reader (otel_progress.conventions.logs.agents.claude_code) on records shaped as
Claude Code 2.1.332 exports them (values copied from a captured ``claude -p`` run: strings
for booleans and counts, the event's full name in the body, ``event.name`` without the
prefix), and on odd values, which must never raise."""

from __future__ import annotations

from typing import Any

import pytest

from otel_progress.conventions.logs import EVIDENCE_ARGUMENTS, EVIDENCE_NAMES, LogRecordView, read_log
from otel_progress.conventions.logs.agents.claude_code import ClaudeCodeLogs
from otel_progress.model import NOT_CAPTURED

SESSION = "a1467fa1-0d64-458e-b8ef-2c89d849d39f"
PROMPT = "fe160ee7-970a-49f8-9ef2-637a8e46cb3f"
SCOPE = "com.anthropic.claude_code.events"


def _record(kind: str, seq: int = 7, **attributes: Any) -> LogRecordView:
    attrs = {"session.id": SESSION, "prompt.id": PROMPT, "event.name": kind, "event.sequence": seq,
             "event.timestamp": "2026-12-01T10:28:00.456Z", **attributes}
    return LogRecordView(time_ns=1796120880456000000, event_name=kind, body=f"claude_code.{kind}",
                         attributes=attrs, scope=SCOPE, resource={"service.name": "claude-code"}, index=seq)


def _result(**attributes: Any) -> LogRecordView:
    base = {"tool_name": "Bash", "tool_use_id": "toolu_01", "success": "true", "duration_ms": "107",
            "tool_input_size_bytes": "44", "tool_result_size_bytes": "5"}
    return _record("tool_result", **{**base, **attributes})


def test_default_tool_result_is_names_evidence_with_the_size_as_a_partial_result() -> None:
    obs = read_log(_result())
    assert obs is not None and obs.kind == "tool" and obs.call is not None
    assert obs.run_key == f"claude_code|{SESSION}|{PROMPT}"
    assert obs.order[0] == 7
    assert obs.evidence_level == EVIDENCE_NAMES == obs.call.evidence_level
    assert obs.call.arguments is NOT_CAPTURED
    assert obs.call.result_truncated and obs.call.result == "<5 bytes>"
    assert obs.call.end_ns - obs.call.start_ns == 107_000_000
    assert obs.call.span_id == "toolu_01" and obs.agent == "claude-code"


def test_tool_details_give_the_arguments() -> None:
    obs = read_log(_result(tool_input='{"command":"echo hello","description":"say"}'))
    assert obs is not None and obs.call is not None
    assert obs.evidence_level == EVIDENCE_ARGUMENTS
    assert obs.call.arguments == {"command": "echo hello", "description": "say"}


def test_a_cut_command_is_restored_from_full_command_and_other_cut_values_are_not_trusted() -> None:
    long = "echo " + "x" * 700 + " end"
    cut = long[:128] + "…[709 chars]"
    obs = read_log(_result(tool_input=f'{{"command":"{cut}","description":"long"}}',
                           tool_parameters=f'{{"bash_command":"echo","full_command":"{long}"}}'))
    assert obs is not None and obs.call is not None
    assert obs.evidence_level == EVIDENCE_ARGUMENTS and obs.call.arguments["command"] == long
    edit = read_log(_result(tool_name="Edit", tool_input='{"file_path":"a.py","old_string":"' + "y" * 128
                            + '…[900 chars]","new_string":"z"}'))
    assert edit is not None and edit.call is not None
    # a cut value is never proof that two requests are the same: names only
    assert edit.evidence_level == EVIDENCE_NAMES and edit.call.arguments is NOT_CAPTURED


def test_a_failure_carries_its_type_and_message_and_no_result() -> None:
    obs = read_log(_result(success="false", error_type="ShellError", error="Shell command failed",
                           tool_result_size_bytes=None))
    assert obs is not None and obs.call is not None
    assert obs.call.error and obs.call.error_type == "ShellError"
    assert obs.call.error_message == "Shell command failed"
    assert obs.call.result is NOT_CAPTURED


def test_api_requests_give_tokens_and_decisions_nothing() -> None:
    tokens = read_log(_record("api_request", 6, input_tokens=120, output_tokens=30, model="m"))
    assert tokens is not None and tokens.kind == "tokens" and tokens.tokens == 150
    assert tokens.input_tokens == 120
    cached = read_log(_record("api_request", 7, input_tokens=3, output_tokens=30, cache_read_tokens=41000,
                              cache_creation_tokens=800, model="m"))
    # the context read: the uncached input and the cache's reads and writes
    assert cached is not None and (cached.tokens, cached.input_tokens) == (33, 41803)
    decision = read_log(_record("tool_decision", 5, decision="accept", tool_name="Bash"))
    assert decision is not None and decision.kind == "other"


def test_another_agents_tool_result_is_not_read_as_claude_code() -> None:
    other = LogRecordView(event_name="tool_result", attributes={"session.id": "s", "tool_name": "x"})
    obs = read_log(other)
    assert obs is None or not obs.run_key.startswith("claude_code|")


@pytest.mark.parametrize("odd", [
    {"success": 1}, {"event.sequence": "not a number"}, {"tool_input": "{not json"}, {"tool_input": "[1, 2]"},
    {"duration_ms": "9" * 400}, {"tool_result_size_bytes": [1]}, {"tool_name": None}, {"session.id": None},
    {"tool_input": '{"command": {"nested": "' + "v" * 200 + '…[300 chars]"}}'},
])
def test_odd_values_never_raise(odd: dict[str, Any]) -> None:
    obs = ClaudeCodeLogs().read(_result(**odd))  # the reader itself, not the registry's guard
    assert obs is None or obs.kind == "tool"


def _compaction(**attributes: Any) -> LogRecordView:
    base = {"trigger": "auto", "success": "true", "duration_ms": "178", "pre_tokens": "95038", "post_tokens": "2700"}
    return _record("compaction", 16, **{**base, **attributes})


def test_a_compaction_is_a_boundary_of_its_prompts_run() -> None:
    obs = read_log(_compaction())
    assert obs is not None and obs.kind == "compaction" and obs.compaction is not None
    assert obs.run_key == f"claude_code|{SESSION}|{PROMPT}" and not obs.session_wide
    assert obs.order[0] == 16
    compaction = obs.compaction
    assert (compaction.trigger, compaction.tokens_before, compaction.tokens_after) == ("auto", 95038, 2700)
    assert compaction.source == "claude_code.compaction" and compaction.time_ns == 1796120880456000000
    manual = read_log(_compaction(trigger="manual", pre_tokens=None, post_tokens=None))
    assert manual is not None and manual.compaction is not None
    assert manual.compaction.trigger == "manual" and manual.compaction.tokens_before is None


def test_a_failed_compaction_is_no_boundary_and_the_summariser_request_is_tokens() -> None:
    failed = read_log(_compaction(success="false", error="compact_not_enough_messages", post_tokens=None))
    assert failed is not None and failed.kind == "other"
    summariser = read_log(_record("api_request", 14, input_tokens=120, output_tokens=30, query_source="compact"))
    assert summariser is not None and summariser.kind == "tokens" and summariser.tokens == 150


@pytest.mark.parametrize("odd", [
    {"success": 1}, {"trigger": ["auto"]}, {"trigger": "sometimes"}, {"pre_tokens": "9" * 40},
    {"post_tokens": {"a": 1}}, {"pre_tokens": -5}, {"session.id": None},
])
def test_odd_compaction_values_never_raise(odd: dict[str, Any]) -> None:
    obs = ClaudeCodeLogs().read(_compaction(**odd))
    assert obs is None or obs.kind in ("compaction", "other")
    if obs is not None and obs.compaction is not None:
        assert obs.compaction.trigger in ("auto", "manual", None)


def _decision(**attributes: Any) -> LogRecordView:
    # as 2.1.332 logs a call a permissions.deny rule refused (tests/coding_agents/test_claude_code_cli.py
    # ::test_real_cli_refused_calls_are_read_as_calls_that_never_ran captures it)
    base = {"decision": "reject", "source": "config", "tool_name": "Bash", "tool_use_id": "toolu_04",
            "tool_source": "builtin", "permission_mode": "bypassPermissions", "request_id": "req_06",
            "tool_parameters": '{"bash_command":"cat","full_command":"cat notes.txt","description":"Show the notes"}'}
    return _record("tool_decision", 7, **{**base, **attributes})


def test_a_rejected_call_is_a_call_that_never_ran_with_its_bash_arguments() -> None:
    obs = read_log(_decision())
    assert obs is not None and obs.kind == "tool" and obs.call is not None
    call = obs.call
    assert call.executed is False and call.name == "Bash"
    # the keys of the tool_input an executed Bash call has: a refused request compares to it
    assert call.arguments == {"command": "cat notes.txt", "description": "Show the notes"}
    assert obs.evidence_level == EVIDENCE_ARGUMENTS == call.evidence_level
    assert call.span_id == "toolu_04" == call.call_id
    assert call.error and call.error_message == "rejected (config)"
    assert obs.run_key == f"claude_code|{SESSION}|{PROMPT}" and obs.order[0] == 7


def test_a_rejected_call_without_details_or_of_another_tool_is_names_only() -> None:
    plain = read_log(_decision(tool_parameters=None))
    assert plain is not None and plain.call is not None and not plain.call.executed
    assert plain.call.arguments is NOT_CAPTURED and plain.evidence_level == EVIDENCE_NAMES
    mcp = read_log(_decision(tool_name="mcp_tool", tool_parameters='{"mcp_server_name":"s","mcp_tool_name":"t"}'))
    assert mcp is not None and mcp.call is not None and mcp.call.arguments is NOT_CAPTURED
    cut = read_log(_decision(tool_parameters='{"full_command":"' + "x" * 128 + '…[900 chars]"}'))
    assert cut is not None and cut.call is not None and cut.call.arguments is NOT_CAPTURED


def test_an_accepted_decision_is_no_call_its_tool_result_is() -> None:
    obs = read_log(_decision(decision="accept"))
    assert obs is not None and obs.kind == "other" and obs.call is None


@pytest.mark.parametrize("odd", [
    {"decision": None}, {"decision": ["reject"]}, {"tool_name": None}, {"tool_name": 3}, {"tool_parameters": "{x"},
    {"tool_parameters": '{"full_command": 5}'}, {"tool_use_id": None}, {"source": {"a": 1}},
])
def test_odd_decisions_never_raise(odd: dict[str, Any]) -> None:
    obs = ClaudeCodeLogs().read(_decision(**odd))
    assert obs is None or obs.kind in ("tool", "other")
