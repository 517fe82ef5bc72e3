"""Gemini CLI's ``gemini_cli.tool_call`` records (0.61.0, ``packages/core/src/telemetry/
types.ts`` ``ToolCallEvent``): a call rejected at its confirmation never ran; with
``logPrompts`` off a nonzero exit is not in the record (read as a success, level names)."""

from __future__ import annotations

from otel_progress.conventions.logs.agents.gemini_cli import GeminiCliConvention
from otel_progress.conventions.logs.record import LogRecordView


def _read(**attributes: object):
    base = {"event.name": "gemini_cli.tool_call", "session.id": "s", "prompt_id": "p",
            "function_name": "run_shell_command", "duration_ms": 5, "content_length": 40}
    record = LogRecordView(event_name="gemini_cli.tool_call", attributes={**base, **attributes})
    return GeminiCliConvention().read(record).call


def test_a_rejected_call_never_ran() -> None:
    assert not _read(success=False, decision="reject", error="User cancelled").executed
    assert _read(success=True, decision="accept").executed
    assert _read(success=True).executed


def test_without_log_prompts_a_nonzero_exit_is_not_in_the_record() -> None:
    # logPrompts on: metadata has the exit code, a failure
    on = _read(success=True, function_args='{"command": "false"}', metadata='{"exitCode": 1, "isError": true}')
    assert on.error and on.error_type == "nonzero_exit"
    # logPrompts off: only the diff-stat keys survive, nothing says it failed: names level
    off = _read(success=True)
    assert not off.error and off.evidence_level == "names"
