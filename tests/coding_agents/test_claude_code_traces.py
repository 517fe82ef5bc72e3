"""Claude Code's beta traces (golden captures of the real CLI, see test_claude_code_cli.py)
through ``otel-progress scan``'s reader: with ``OTEL_LOG_TOOL_CONTENT=1`` the
``tool.output`` event gives the arguments and the whole output (level ``full``: every
signal applies); without it the spans carry tool names only."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_progress.conventions import SpanRecord, read_tool
from otel_progress.conventions.claude_code import ClaudeCodeConvention
from otel_progress.scan import scan_paths

from .test_claude_code_cli import golden


def _traces(scenario: str) -> Path:
    path = golden(scenario, "traces")
    if not path.exists():
        pytest.fail(f"{path.name} is missing (see test_claude_code_cli.py)")
    return path


def _scan(scenario: str) -> list[tuple[str, int]]:
    result = scan_paths([str(_traces(scenario))], progress=False)
    assert sum(r.tool_calls for r in result.reports) > 0
    return [(d.reason.value, d.turn) for r in result.reports for d in r.detections]


def test_loop_with_tool_content_is_a_repeat_cycle_at_the_third_call() -> None:
    # (the same command re-issued once is a re-check; its third copy is the loop: issue 25)
    assert _scan("loop-details")[0] == ("repeat_cycle", 3)


def test_loop_without_tool_content_has_names_only_and_no_detection() -> None:
    assert _scan("loop-default") == []


def test_healthy_run_has_no_detection() -> None:
    assert _scan("healthy-details") == []


def test_the_output_event_gives_arguments_and_result() -> None:
    span = SpanRecord(trace_id="t", span_id="s", name="claude_code.tool",
                      attributes={"span.type": "tool", "gen_ai.operation.name": "execute_tool",
                                  "gen_ai.tool.name": "Bash", "full_command": "cat notes.txt"},
                      events=[("tool.output", {"bash_command": "cat notes.txt", "output": "the first line"})])
    content = read_tool(span)
    assert content.name == "Bash"
    assert content.arguments == {"bash_command": "cat notes.txt"}
    assert content.result == "the first line"
    bare = SpanRecord(trace_id="t", span_id="s", name="claude_code.tool",
                      attributes={"span.type": "tool", "gen_ai.operation.name": "execute_tool",
                                  "gen_ai.tool.name": "Bash", "full_command": "cat notes.txt"})
    content = read_tool(bare)
    assert content.arguments == {"command": "cat notes.txt"} and content.result is None


def test_odd_events_never_raise() -> None:
    for events in ([("tool.output", None)], [("tool.output", {"output": ["x"], "content": 3})], [None], "x"):
        span = SpanRecord(trace_id="t", span_id="s", name="claude_code.tool",
                          attributes={"span.type": "tool", "gen_ai.tool.name": "Bash", "full_command": 7},
                          events=events)  # type: ignore[arg-type]
        ClaudeCodeConvention().read_tool(span)


def test_an_output_at_claude_codes_cut_is_a_truncated_preview() -> None:
    span = SpanRecord(trace_id="t", span_id="s", name="claude_code.tool",
                      attributes={"span.type": "tool", "gen_ai.operation.name": "execute_tool",
                                  "gen_ai.tool.name": "Bash"},
                      events=[("tool.output", {"bash_command": "cat big.log", "output": "x" * 60_000})])
    assert ClaudeCodeConvention().read_tool(span).truncated
    assert read_tool(span).truncated  # and the registry passes it on (ToolCall.result_truncated)
    assert not read_tool(SpanRecord(trace_id="t", span_id="s", name="claude_code.tool",
                                    attributes={"span.type": "tool", "gen_ai.tool.name": "Bash"},
                                    events=[("tool.output", {"output": "short"})])).truncated


def test_spans_before_2_1_300_without_gen_ai_keys_are_read() -> None:
    # The shapes of 2.0.20 to 2.1.299 (read from the packages, and from the 2.1.197 capture
    # in test_claude_code_cli.py): span.type and tool_name, no gen_ai.operation.name.
    from otel_progress.conventions.spans import SpanKind, agent_name, classify, read_tokens, read_tool_call

    tool = SpanRecord(trace_id="t", span_id="s2", parent_id="s1", name="claude_code.tool",
                      attributes={"span.type": "tool", "tool_name": "Bash", "full_command": "cat notes.txt",
                                  "agent_id": "a1"},
                      events=[("tool.output", {"bash_command": "cat notes.txt", "output": "the first line"})])
    assert classify(tool) is SpanKind.TOOL
    call = read_tool_call(tool)
    assert (call.name, call.arguments, call.result) == ("Bash", {"bash_command": "cat notes.txt"}, "the first line")
    interaction = SpanRecord(trace_id="t", span_id="s1", name="claude_code.interaction",
                             attributes={"span.type": "interaction", "interaction.sequence": 1})
    assert classify(interaction) is SpanKind.AGENT and agent_name(interaction) == "claude_code.interaction"
    llm = SpanRecord(trace_id="t", span_id="s3", parent_id="s1", name="claude_code.llm_request",
                     attributes={"span.type": "llm_request", "model": "m", "input_tokens": 120, "output_tokens": 30})
    assert classify(llm) is SpanKind.MODEL and read_tokens(llm) == 150
    for name, kind in (("claude_code.tool.execution", "tool.execution"), ("claude_code.tool", "llm_request"),
                       ("other.tool", "tool"), ("claude_code.tool", ["tool"])):
        span = SpanRecord(trace_id="t", span_id="s", name=name, attributes={"span.type": kind, "tool_name": "x"})
        assert classify(span) is SpanKind.OTHER, (name, kind)


def test_the_2_1_197_capture_is_the_same_loop() -> None:
    path = Path(__file__).parent / "golden" / "claude-code-2.1.197-loop-details.traces.jsonl"
    result = scan_paths([str(path)], progress=False)
    assert [(d.reason.value, d.turn) for r in result.reports for d in r.detections][:1] == [("repeat_cycle", 3)]
