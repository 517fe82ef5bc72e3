"""The Gemini CLI log reader (otel_progress.conventions.logs.agents.gemini_cli) on records shaped as
Gemini CLI 0.61.0 exports them (attribute values copied from a captured ``gemini -p`` run:
real booleans and numbers, ``function_args`` and ``metadata`` as pretty JSON)."""

from __future__ import annotations

from typing import Any

from otel_progress.conventions.logs import EVIDENCE_ARGUMENTS, LogRecordView, read_log
from otel_progress.model import NOT_CAPTURED

SESSION = "8952de0f-b068-4de3-925a-18968374eb3f"


def _tool(index: int = 0, **extra: Any) -> LogRecordView:
    attributes: dict[str, Any] = {
        "session.id": SESSION, "event.name": "gemini_cli.tool_call",
        "event.timestamp": f"2026-12-01T10:26:0{index}.994Z", "function_name": "run_shell_command",
        "duration_ms": 189, "success": True, "decision": "accept", "prompt_id": SESSION, "tool_type": "native",
        "content_length": 93, "start_time": None, "end_time": None,
        "function_args": '{\n  "command": "echo hello"\n}', "metadata": '{\n  "exitCode": 0,\n  "isError": false\n}',
    }
    attributes.update(extra)
    return LogRecordView(time_ns=1796120763995000000 + index, event_name="gemini_cli.tool_call",
                         attributes=attributes, index=index)


def test_a_tool_call_is_arguments_evidence_with_its_size_as_the_partial_result() -> None:
    obs = read_log(_tool())
    assert obs is not None and obs.call is not None
    assert obs.kind == "tool" and obs.run_key == f"gemini_cli|{SESSION}|{SESSION}"
    assert obs.call.arguments == {"command": "echo hello"}
    assert obs.call.result == {"content_length": 93}
    assert obs.evidence_level == obs.call.evidence_level == EVIDENCE_ARGUMENTS
    assert not obs.call.error and obs.call.agent == "gemini-cli"
    later = read_log(_tool(1))
    assert later is not None and obs.order < later.order
    other_prompt = read_log(_tool(prompt_id="8952de0f########2"))
    assert other_prompt is not None and other_prompt.run_key != obs.run_key


def test_a_nonzero_exit_logged_as_success_is_a_failure() -> None:
    obs = read_log(_tool(metadata='{\n  "exitCode": 3,\n  "isError": true\n}'))
    assert obs is not None and obs.call is not None
    assert obs.call.error and obs.call.error_type == "nonzero_exit" and obs.call.error_message is None
    assert obs.call.result == {"content_length": 93, "exit_code": 3}


def test_a_failed_call_carries_its_error_type_and_message() -> None:
    obs = read_log(_tool(function_name="replace", success=False, decision=None, content_length=48,
                         error="params must have required property 'instruction'",
                         error_type="invalid_tool_params", metadata=None))
    assert obs is not None and obs.call is not None and obs.call.error
    assert obs.call.error_type == "invalid_tool_params"
    assert obs.call.error_message == "params must have required property 'instruction'"


def test_tokens_come_from_api_responses() -> None:
    record = LogRecordView(event_name="gemini_cli.api_response", attributes={
        "session.id": SESSION, "prompt_id": SESSION, "event.timestamp": "2026-12-01T10:26:03.235Z",
        "input_token_count": 900, "output_token_count": 30, "thoughts_token_count": 0, "total_token_count": 930})
    obs = read_log(record)
    assert obs is not None and obs.kind == "tokens" and obs.tokens == 930
    assert obs.input_tokens == 900


def test_odd_records_are_not_read_and_nothing_raises() -> None:
    assert read_log(LogRecordView(event_name="gemini_cli.tool_call", attributes={"function_name": "x"})) is None
    odd = read_log(LogRecordView(event_name="gemini_cli.tool_call", resource={"session.id": SESSION},
                                 attributes={"function_name": "x", "metadata": "[1", "content_length": "n/a",
                                             "start_time": "soon", "success": "maybe"}))
    assert odd is not None and odd.call is not None and odd.call.result is NOT_CAPTURED and not odd.call.error
    assert odd.run_key == f"gemini_cli|{SESSION}|"


def test_without_function_args_only_names_are_known() -> None:
    record = _tool()
    record.attributes = {k: v for k, v in record.attributes.items() if k != "function_args"}
    obs = read_log(record)
    assert obs is not None and obs.call is not None
    assert obs.evidence_level == obs.call.evidence_level == "names"


def _compression(**extra: Any) -> LogRecordView:
    attributes: dict[str, Any] = {
        "session.id": SESSION, "installation.id": "i", "interactive": False,
        "event.name": "gemini_cli.chat_compression", "event.timestamp": "2026-12-01T23:11:15.434Z",
        "tokens_before": 700000, "tokens_after": 256,
    }
    attributes.update(extra)
    return LogRecordView(time_ns=1796166675434000000, event_name="gemini_cli.chat_compression",
                         body="Chat compression (Saved 699744 tokens)", attributes=attributes, index=9)


def test_a_compression_is_a_boundary_of_the_sessions_current_run() -> None:
    obs = read_log(_compression())
    assert obs is not None and obs.kind == "compaction" and obs.compaction is not None
    # no prompt_id in the record: the session's prefix, for the run seen last
    assert obs.session_wide and obs.run_key == f"gemini_cli|{SESSION}|"
    compaction = obs.compaction
    assert (compaction.tokens_before, compaction.tokens_after, compaction.trigger) == (700000, 256, None)
    assert compaction.time_ns == 1796166675434000000 and compaction.source == "gemini_cli.chat_compression"


def test_a_compression_that_did_not_shrink_the_history_is_none() -> None:
    # an empty summary is logged with tokens_after == tokens_before, an inflated one above it: both kept the history
    for after in (700000, 800000):
        obs = read_log(_compression(tokens_after=after))
        assert obs is not None and obs.kind == "other"
    for odd in ({"tokens_before": None}, {"tokens_after": "x"}, {"tokens_after": -1}, {"tokens_before": [1]}):
        obs = read_log(_compression(**odd))
        assert obs is not None and obs.kind == "other"


def _loop(scope: str = "gemini-cli", **extra: Any) -> LogRecordView:
    # LoopDetectedEvent.toOpenTelemetryAttributes (0.61.0), as captured by test_gemini_loop_verdict.py
    attributes: dict[str, Any] = {
        "session.id": SESSION, "installation.id": "407d2f81-b8aa-4fb7-a778-0ba44ad9da03", "interactive": False,
        "auth_type": "gemini-api-key", "event.name": "loop_detected", "event.timestamp": "2026-12-07T11:13:38.611Z",
        "loop_type": "consecutive_identical_tool_calls", "prompt_id": "", "count": 1,
    }
    attributes.update(extra)
    return LogRecordView(time_ns=1796642018611000000, event_name="loop_detected", scope=scope,
                         body="Loop detected (Strike 1: Attempting recovery). Type: consecutive_identical_tool_calls.",
                         attributes=attributes, resource={"service.name": "gemini-cli"} if scope else {})


def test_gemini_s_loop_check_is_a_verdict_of_the_session_s_current_run() -> None:
    obs = read_log(_loop())
    assert obs is not None and obs.kind == "verdict" and obs.verdict is not None and obs.call is None
    assert obs.verdict.source == "gemini_cli.loop_detected"
    assert obs.verdict.kind == "consecutive_identical_tool_calls" and obs.verdict.count == 1
    # prompt_id "" (0.61.0): the record names the session only
    assert obs.session_wide and obs.run_key == f"gemini_cli|{SESSION}|"
    named = read_log(_loop(prompt_id=SESSION, loop_type="llm_detected_loop", confirmed_by_model="gemini-2.5-pro",
                           analysis="The model keeps reading the same file.", confidence=0.9, count=2))
    assert named is not None and named.verdict is not None and not named.session_wide
    assert named.run_key == f"gemini_cli|{SESSION}|{SESSION}" and named.verdict.kind == "llm_detected_loop"


def test_a_loop_detected_record_of_another_producer_is_not_gemini_s() -> None:
    stranger = LogRecordView(event_name="loop_detected", scope="other", attributes={"session.id": "s", "count": 1})
    assert read_log(stranger) is None


def test_odd_loop_records_never_raise() -> None:
    odd: list[dict[str, Any]] = [{"count": "x"}, {"count": float("inf")}, {"loop_type": ["a"]}, {"count": 2**40},
                                 {"session.id": None}]
    for extra in odd:
        obs = read_log(_loop(**extra))
        assert obs is None or obs.kind == "verdict"
