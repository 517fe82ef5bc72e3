"""The Qwen Code log reader (otel_progress.conventions.logs.agents.qwen_code) on records shaped as Qwen
Code 0.24.4 exports them (values copied from a captured ``qwen -p`` run: ``function_args``
as pretty-printed JSON text, booleans and counts as such), and on odd values."""

from __future__ import annotations

from typing import Any

import pytest

from otel_progress.conventions.logs import EVIDENCE_ARGUMENTS, EVIDENCE_NAMES, LogRecordView, read_log
from otel_progress.conventions.logs.agents.qwen_code import QwenCodeLogs
from otel_progress.model import NOT_CAPTURED

SESSION = "9f51071f-ae32-4766-9d7c-31fb9090bcc6"
PROMPT = SESSION + "########0"


def _record(event: str, index: int = 0, **attributes: Any) -> LogRecordView:
    attrs = {"session.id": SESSION, "event.name": event, "event.timestamp": "2026-12-01T10:29:43.911Z",
             "prompt_id": PROMPT, **attributes}
    return LogRecordView(time_ns=1796120983911000000 + index, event_name=event, attributes=attrs,
                         resource={"service.name": "qwen-code"}, index=index)


def _call(**attributes: Any) -> LogRecordView:
    base = {"call_id": "call_01", "function_name": "run_shell_command",
            "function_args": '{\n  "command": "echo hello",\n  "description": "say"\n}', "duration_ms": 458,
            "status": "success", "execution_status": "success", "success": True, "content_length": 120}
    return _record("qwen-code.tool_call", **{**base, **attributes})


def test_a_tool_call_is_arguments_evidence_with_the_length_as_a_partial_result() -> None:
    obs = read_log(_call())
    assert obs is not None and obs.kind == "tool" and obs.call is not None
    assert obs.run_key == f"qwen_code|{SESSION}|{PROMPT}"
    assert obs.evidence_level == EVIDENCE_ARGUMENTS == obs.call.evidence_level
    assert obs.call.arguments == {"command": "echo hello", "description": "say"}
    assert obs.call.result == "<120 chars>" and obs.call.result_truncated
    assert obs.call.span_id == "call_01" and obs.agent == "qwen-code"


def test_a_failure_has_its_type_and_message() -> None:
    obs = read_log(_call(status="error", success=False, error_type="edit_no_occurrence_found",
                         error="Failed to edit, 0 occurrences found for old_string in a.txt."))
    assert obs is not None and obs.call is not None
    assert obs.call.error and obs.call.error_type == "edit_no_occurrence_found"
    assert obs.call.error_message.startswith("Failed to edit")
    assert obs.call.result is NOT_CAPTURED


def test_unreadable_arguments_are_names_evidence() -> None:
    obs = read_log(_call(function_args="{not json"))
    assert obs is not None and obs.call is not None
    assert obs.evidence_level == EVIDENCE_NAMES and obs.call.arguments is NOT_CAPTURED


def test_api_responses_give_tokens() -> None:
    obs = read_log(_record("qwen-code.api_response", input_token_count=150, output_token_count=25))
    assert obs is not None and obs.kind == "tokens" and obs.tokens == 175
    assert obs.input_tokens == 150


@pytest.mark.parametrize("odd", [
    {"function_name": None}, {"function_name": 3}, {"session.id": ""}, {"content_length": "x"},
    {"duration_ms": float("nan")}, {"function_args": ["a"]}, {"status": None, "success": "false"},
    {"error": {"nested": 1}, "status": "error"},
])
def test_odd_values_never_raise(odd: dict[str, Any]) -> None:
    obs = QwenCodeLogs().read(_call(**odd))
    assert obs is None or obs.kind == "tool"


def test_qwen_s_loop_check_is_a_verdict_of_the_prompt_s_run() -> None:
    # logLoopDetected (0.24.4): the common attributes, then LoopDetectedEvent's own
    record = LogRecordView(time_ns=1796120983911000000, event_name="loop_detected", scope="qwen-code",
                           body="Loop detected. Type: consecutive_identical_tool_calls.",
                           attributes={"session.id": SESSION, "event.name": "loop_detected",
                                       "event.timestamp": "2026-12-01T10:29:43.911Z",
                                       "loop_type": "consecutive_identical_tool_calls", "prompt_id": PROMPT},
                           resource={"service.name": "qwen-code"})
    obs = read_log(record)
    assert obs is not None and obs.kind == "verdict" and obs.verdict is not None
    assert obs.verdict.source == "qwen_code.loop_detected"
    assert obs.verdict.kind == "consecutive_identical_tool_calls"
    assert obs.run_key == f"qwen_code|{SESSION}|{PROMPT}" and not obs.session_wide
    unnamed = read_log(_record("loop_detected", loop_type="read_file_loop", prompt_id=""))
    assert unnamed is not None and unnamed.session_wide and unnamed.verdict is not None
    assert read_log(_record("loop_detected", loop_type=["x"])) is not None  # odd values: no kind, no exception


def test_a_call_rejected_at_its_confirmation_never_ran() -> None:
    # ToolCallEvent.decision = getDecisionFromOutcome(outcome): "cancel" -> "reject"
    rejected = read_log(_call(status="cancelled", success=False, decision="reject", content_length=None))
    assert rejected is not None and rejected.call is not None and rejected.call.executed is False
    accepted = read_log(_call(decision="auto_accept"))
    assert accepted is not None and accepted.call is not None and accepted.call.executed
