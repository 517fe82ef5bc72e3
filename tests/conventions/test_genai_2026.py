"""The GenAI conventions of 2026 (open-telemetry/semantic-conventions-genai, see
docs/conventions.md "The conventions of 2026"), read beside the older shapes, each through
the readers and through the engine (``scan`` of OTLP/JSON traces)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from otel_progress import Config, ProgressEngine
from otel_progress.conventions import (
    COMPACTED_CONTEXT,
    COMPACTION,
    is_compacted,
    is_nested,
    read_compaction,
    read_tool,
    tool_decision,
)
from otel_progress.conventions.spans import SpanKind, agent_name, classify, read_tool_call
from otel_progress.model import Reason
from otel_progress.scan import scan_paths

from .helpers import record

TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}


def _call(span: Any, **kw: Any) -> Any:
    return read_tool_call(span, **kw)


# -- run roots ------------------------------------------------------------------------------


def test_invocation_operations_are_agent_spans_beside_invoke_agent() -> None:
    turn = record("handle_conversation_turn support", {"gen_ai.operation.name": "handle_conversation_turn",
                                                       "gen_ai.agent.name": "support",
                                                       "gen_ai.invocation.is_nested": False})
    workflow = record("invoke_workflow triage", {"gen_ai.operation.name": "invoke_workflow",
                                                 "gen_ai.workflow.name": "triage"})
    old = record("invoke_agent planner", {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"})
    assert [classify(s) for s in (turn, workflow, old)] == [SpanKind.AGENT] * 3
    assert [agent_name(s) for s in (turn, workflow, old)] == ["support", "triage", "planner"]
    unnamed = record("handle_conversation_turn", {"gen_ai.operation.name": "handle_conversation_turn"})
    assert agent_name(unnamed) == "handle_conversation_turn"  # no name: the span name, as for invoke_agent
    assert is_nested(turn) is False and is_nested(old) is None
    assert is_nested(record("invoke_agent x", {"gen_ai.invocation.is_nested": "true"})) is True
    assert is_nested(record("invoke_agent x", {"gen_ai.invocation.is_nested": ["x"]})) is None


# -- decisions ------------------------------------------------------------------------------


def _decided(outcome: str, how: str, **extra: Any) -> Any:
    if how == "attribute":
        return record("execute_tool search", {**TOOL, "gen_ai.tool.call.decision.outcome": outcome, **extra})
    return record("execute_tool search", {**TOOL, **extra},
                  events=[("gen_ai.tool.call.decision", {"gen_ai.tool.call.decision.outcome": outcome})])


def test_a_denied_call_or_one_awaiting_approval_never_ran() -> None:
    for how in ("attribute", "event"):
        assert not _call(_decided("deny", how)).executed
        assert not _call(_decided("require_approval", how)).executed
        assert _call(_decided("allow", how)).executed
        # approval asked, then given: the call ran and has its result
        assert _call(_decided("require_approval", how, **{"gen_ai.tool.call.result": "3 hits"})).executed
    later = record("execute_tool search", TOOL, events=[
        ("gen_ai.tool.call.decision", {"gen_ai.tool.call.decision.outcome": "require_approval"}),
        ("gen_ai.tool.call.decision", {"gen_ai.tool.call.decision.outcome": "allow"})])
    assert tool_decision(later) == "allow" and _call(later).executed
    assert _call(record("execute_tool search", TOOL)).executed  # no decision: the older shape
    odd = record("execute_tool search", {**TOOL, "gen_ai.tool.call.decision.outcome": 7},
                 events=[("gen_ai.tool.call.decision", None)])  # type: ignore[list-item]
    assert _call(odd).executed


def test_denied_calls_are_neither_a_repeat_nor_a_failure() -> None:
    engine = ProgressEngine(Config())
    dets = []
    for _ in range(8):
        span = _decided("deny", "event", **{"gen_ai.tool.call.arguments": '{"q": "rm -rf /"}',
                                            "error.type": "denied"})
        dets += engine.observe(_call(span, run_id="r"), flush=True)
    # never a step (no repeat, no failure of the tool); the same action refused again and
    # again is the model's loop: unexecuted_repeat (issue 29), at the 3rd and the 6th
    assert [(d.reason, d.figures["cause"]) for d in dets] == [(Reason.UNEXECUTED_REPEAT, "refused")] * 2
    assert engine.stats.calls == 0 and engine.run_state(span.trace_id, "r").turn == 0
    # a loop through denied calls is still the loop of the calls that ran
    engine = ProgressEngine(Config())
    found = []
    for _ in range(3):
        found += engine.observe(_call(record("execute_tool search", {**TOOL, "gen_ai.tool.call.arguments": '{"q": 1}',
                                                                    "gen_ai.tool.call.result": "0 results"}),
                                      run_id="r"), flush=True)
        found += engine.observe(_call(_decided("deny", "attribute"), run_id="r"), flush=True)
    assert [d.reason for d in found][:1] == [Reason.REPEAT_CYCLE] and found[0].turn == 2


# -- command exit codes ---------------------------------------------------------------------


def _command(code: Any, command: str, **extra: Any) -> Any:
    return record("execute_tool exec_command make", {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "exec_command",
        "process.executable.name": "make", "process.exit.code": code,
        "gen_ai.tool.call.arguments": json.dumps({"cmd": command}), **extra})


def test_a_nonzero_exit_code_is_a_failure_whose_type_is_the_code() -> None:
    call = _call(_command(2, "make test"))
    assert call.error and call.error_type == "2"
    # error.type as the conventions say it SHOULD be set: the same key
    assert _call(_command(2, "make test", **{"error.type": "2"})).error_type == "2"
    # another error than the exit code wins
    assert _call(_command(2, "make test", **{"error.type": "timeout"})).error_type == "timeout"
    ok = _call(_command(0, "make test", **{"gen_ai.tool.call.result": "ok"}))
    assert not ok.error and ok.error_type is None
    for odd in ("x", None, 1.5, True, [1]):
        assert not _call(_command(odd, "make")).error


def test_a_command_failing_with_the_same_exit_code_recurs() -> None:
    engine = ProgressEngine(Config())
    found = []
    for _ in range(5):
        found += engine.observe(_call(_command(2, "make test"), run_id="r"), flush=True)
    reasons = [(d.reason, d.turn) for d in found]
    assert reasons and reasons[0] == (Reason.ERROR_RECURRENCE, 3)  # the identical failing request


# -- fetch_response -------------------------------------------------------------------------


def _fetch(status: str | None, start_s: float, response: str = "resp_1") -> Any:
    attrs = {"gen_ai.operation.name": "fetch_response", "gen_ai.provider.name": "openai",
             "gen_ai.response.id": response, "gen_ai.usage.input_tokens": 900, "gen_ai.usage.output_tokens": 40}
    if status:
        attrs["gen_ai.response.status"] = status
    span = record("fetch_response", attrs)
    span.start_ns = int(start_s * 1e9)
    span.end_ns = span.start_ns + 200_000_000
    return span


def test_fetch_response_is_a_poll() -> None:
    span = _fetch("in_progress", 1)
    assert classify(span) is SpanKind.TOOL  # not a model call: its usage is never counted per poll
    content = read_tool(span)
    assert (content.name, content.arguments, content.result) == (
        "fetch_response", {"response_id": "resp_1"}, {"status": "in_progress", "id": "resp_1"})
    assert read_tool(_fetch(None, 1)).result is None


def test_polling_a_background_response_is_a_wait_not_a_repeat() -> None:
    engine = ProgressEngine(Config())
    found = []
    for i in range(30):
        found += engine.observe(_call(_fetch("in_progress", 10 + i * 5), run_id="r"), flush=True)
    found += engine.observe(_call(_fetch("completed", 200), run_id="r"), flush=True)
    assert found == []
    # past the wait budget it is a wait that did not end, not a repeat
    engine = ProgressEngine(Config(implicit_max_wait_seconds=60))
    found = []
    for i in range(30):
        found += engine.observe(_call(_fetch("queued", 10 + i * 5), run_id="r"), flush=True)
    assert [d.reason for d in found][:1] == [Reason.WAIT_TIMEOUT]
    # fetching a finished response again and again is a loop
    engine = ProgressEngine(Config())
    found = []
    for i in range(3):
        found += engine.observe(_call(_fetch("completed", 10 + i), run_id="r"), flush=True)
    assert [d.reason for d in found][:1] == [Reason.REPEAT_CYCLE]


# -- compaction marker ----------------------------------------------------------------------


def test_the_compaction_marker_is_read_from_model_spans() -> None:
    chat = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 10}
    assert is_compacted(record("chat m", {**chat, "gen_ai.conversation.compacted": True}))
    assert is_compacted(record("chat m", {**chat, "gen_ai.conversation.compacted": "true"}))
    assert not is_compacted(record("chat m", chat))
    assert not is_compacted(record("chat m", {**chat, "gen_ai.conversation.compacted": [True]}))


def test_read_compaction_tells_a_compaction_from_a_compacted_context() -> None:
    chat = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 10}
    assert read_compaction(record("chat m", {**chat, "gen_ai.conversation.compacted": True})) == COMPACTED_CONTEXT
    assert read_compaction(record("chat m", chat)) is None
    # Claude Code 2.1.332: the summariser's own llm_request span is the compaction
    llm = {"span.type": "llm_request", "gen_ai.operation.name": "chat", "input_tokens": 120, "success": True}
    assert read_compaction(record("claude_code.llm_request", {**llm, "query_source_safe": "compact"})) == COMPACTION
    assert read_compaction(record("claude_code.llm_request", {**llm, "query_source_safe": "sdk"})) is None
    failed = {**llm, "query_source_safe": "compact", "success": False}
    assert read_compaction(record("claude_code.llm_request", failed)) is None
    assert read_compaction(record("claude_code.tool", {"span.type": "tool", "query_source_safe": "compact"})) is None


# -- end to end: a 2026-shaped trace through scan -------------------------------------------


def _otlp_span(trace: str, sid: int, parent: int | None, name: str, attrs: dict[str, Any], t: int,
               events: list[tuple[str, dict[str, Any]]] = ()) -> dict[str, Any]:
    def kv(d: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for k, v in d.items():
            value = ({"boolValue": v} if isinstance(v, bool) else {"intValue": str(v)} if isinstance(v, int)
                     else {"stringValue": str(v)})
            out.append({"key": k, "value": value})
        return out
    span = {"traceId": trace, "spanId": f"{sid:016x}", "name": name, "kind": 1,
            "startTimeUnixNano": str(t * 10**9), "endTimeUnixNano": str(t * 10**9 + 10**8), "attributes": kv(attrs),
            "events": [{"name": n, "timeUnixNano": str(t * 10**9), "attributes": kv(a)} for n, a in events]}
    if parent is not None:
        span["parentSpanId"] = f"{parent:016x}"
    return span


def test_a_2026_trace_through_scan(tmp_path: Path) -> None:
    trace = "ab" * 16
    spans = [_otlp_span(trace, 1, None, "handle_conversation_turn support",
                        {"gen_ai.operation.name": "handle_conversation_turn", "gen_ai.agent.name": "support",
                         "gen_ai.invocation.is_nested": False}, 100)]
    sid = 2
    for i in range(3):
        spans.append(_otlp_span(trace, sid, 1, "execute_tool search",
                                {**TOOL, "gen_ai.tool.call.arguments": '{"q": "x"}',
                                 "gen_ai.tool.call.result": "0 results"}, 101 + 2 * i))
        spans.append(_otlp_span(trace, sid + 1, 1, "execute_tool shell",
                                {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "shell"}, 102 + 2 * i,
                                [("gen_ai.tool.call.decision", {"gen_ai.tool.call.decision.outcome": "deny"})]))
        sid += 2
    path = tmp_path / "traces.json"
    path.write_text(json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                                   "scopeSpans": [{"spans": spans}]}]}))
    result = scan_paths([str(path)], progress=False)
    (report,) = [r for r in result.reports if r.tool_calls]
    (run,) = report.runs
    assert run.turns == 3  # the denied calls are no steps of the run
    assert run.agent == "support" and run.run_id == "0000000000000001"  # the turn is the run root
    assert [(d.reason, d.turn) for d in report.detections][:1] == [(Reason.REPEAT_CYCLE, 2)]
