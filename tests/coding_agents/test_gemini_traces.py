"""Gemini CLI's ``tool_call`` spans (``telemetry.traces``) through the span convention
(otel_progress.conventions.gemini_cli) and ``otel-progress scan``: the golden traces
captured from the real CLI 0.61.0 (see test_gemini_cli.py) and spans shaped as its
``runInDevTraceSpan`` writes them (packages/core/src/telemetry/trace.ts).

With the result in ``gen_ai.output.messages`` the evidence is full: the loop (two commands
in turn) is a ``repeat_cycle`` at the fourth call, earlier than the logs allow (the logs
give only result sizes); the same failing edit is ``error_recurrence``; the healthy run is
clean. Every ``tool_call`` is a trace of its own, grouped into one run by
``gen_ai.conversation.id``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_progress.conventions import SpanRecord, classify, read_tool
from otel_progress.conventions.record import SpanKind
from otel_progress.conventions.spans import read_tool_call, run_group
from otel_progress.scan import scan_paths

from .cli_capture import GOLDEN

VERSION = "0.61.0"
SESSION = "8952de0f-b068-4de3-925a-18968374eb3f"


def scan_detections(path: Path) -> list[tuple[str, int, dict[str, Any]]]:
    """``(reason, turn, event attributes)`` of what scan finds in a traces file."""
    result = scan_paths([str(path)], progress=False)
    assert sum(r.tool_calls for r in result.reports) > 0, "the tool_call spans are read"
    return [(d.reason.value, d.turn, d.event_attributes()) for r in result.reports for d in r.detections]


def check_traces(scenario: str, path: Path) -> None:
    """What scan must find in a traces capture of ``scenario``."""
    found = scan_detections(path)
    for _reason, _turn, attributes in found:
        assert "progress.evidence_level" not in attributes, "the spans carry the whole result"
    if scenario == "loop":
        assert found[0][:2] == ("repeat_cycle", 4)
        assert found[0][2]["progress.period"] == 2
    elif scenario == "failing-edit":
        assert [f[:2] for f in found] == [("error_recurrence", 4)]
        assert found[0][2]["progress.identical_requests"] == 3
    else:
        assert found == []


@pytest.mark.parametrize("scenario", ["loop", "failing-edit", "healthy"])
def test_golden_traces(scenario: str) -> None:
    path = GOLDEN / f"gemini-cli-{VERSION}-{scenario}.traces.jsonl"
    assert path.exists(), f"{path.name} is missing (see test_gemini_cli.py)"
    check_traces(scenario, path)


def _span(output: Any, args: dict[str, Any] | None = None, parent: str = "cd31c46e0f1a2b3c") -> SpanRecord:
    call = {"callId": "run_shell_command__call_000", "name": "run_shell_command",
            "args": args or {"command": "cat notes.txt"}, "prompt_id": SESSION}
    return SpanRecord(
        trace_id="a146e134" * 4, span_id="1234abcd5678ef90", parent_id=parent, name="tool_call",
        attributes={"gen_ai.operation.name": "tool_call", "gen_ai.tool.name": "run_shell_command",
                    "gen_ai.tool.call_id": "run_shell_command__call_000", "gen_ai.conversation.id": SESSION,
                    "gen_ai.input.messages": json.dumps(call),
                    "gen_ai.output.messages": output if isinstance(output, str) else json.dumps(output)})


def _completed(text: str, code: int | None = None, status: str = "success", **response: Any) -> dict[str, Any]:
    body = {"callId": "run_shell_command__call_000",
            "responseParts": [{"functionResponse": {"id": "run_shell_command__call_000", "name": "run_shell_command",
                                                    "response": {"output": text}}}],
            "resultDisplay": "hello", **response}
    if code is not None:
        body["data"] = {"exitCode": code, "isError": code != 0}
    return {"status": status, "request": {}, "response": body}


def test_the_process_group_id_is_taken_off_so_identical_outputs_are_equal() -> None:
    text = "<untrusted_context>\nOutput: hello\nProcess Group PGID: {}\n</untrusted_context>"
    a = read_tool(_span(_completed(text.format(12833))))
    b = read_tool(_span(_completed(text.format(40007))))
    assert a.result == b.result and "PGID" not in str(a.result)
    assert a.arguments == {"command": "cat notes.txt"} and a.name == "run_shell_command"
    assert not a.truncated and a.error_type is None


def test_a_nonzero_exit_on_an_ok_span_is_a_failure() -> None:
    call = read_tool_call(_span(_completed("Output: hello\nExit Code: 3", code=3)))
    assert call.error and call.error_type == "nonzero_exit" and not call.result_truncated


def test_an_error_status_is_a_failure_with_its_message() -> None:
    failed = _completed("", status="error", errorType="edit_no_occurrence_found",
                        error={"message": "Could not find an exact match for 'old_string'"})
    call = read_tool_call(_span(failed))
    assert call.error and call.error_type == "edit_no_occurrence_found"
    assert call.error_message == "Could not find an exact match for 'old_string'"


def test_a_cut_output_is_a_truncated_preview() -> None:
    text = json.dumps(_completed("x" * 20000))[:10000] + "...[TRUNCATED: original length 20391]"
    call = read_tool_call(_span(text))
    assert call.result_truncated and isinstance(call.result, str) and call.result.startswith('"response":')


def test_tool_calls_of_one_session_are_one_run_although_each_has_a_parent() -> None:
    span = _span(_completed("hello"))
    assert classify(span) is SpanKind.TOOL
    assert run_group(span) == f"group:gen_ai.conversation.id={SESSION}"
    other = SpanRecord(trace_id="b" * 32, span_id="c" * 16, parent_id="d" * 16, name="execute_tool x",
                       attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.conversation.id": SESSION})
    assert run_group(other) is None, "other parented tool spans keep their trace's run"


def test_odd_values_never_raise() -> None:
    for output in ("", "[]", "{", json.dumps({"status": "error", "response": []}), json.dumps({"response": {}})):
        read_tool_call(_span(output))
    odd = SpanRecord(trace_id="e" * 32, span_id="f" * 16, parent_id="a" * 16, name="tool_call",
                     attributes={"gen_ai.operation.name": ["tool_call"], "gen_ai.tool.name": "x",
                                 "gen_ai.conversation.id": SESSION})
    assert run_group(odd) is None, "an unhashable operation value is no per-call operation"
    assert classify(odd) is not SpanKind.TOOL
