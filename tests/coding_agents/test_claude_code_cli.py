"""The real Claude Code CLI (``@anthropic-ai/claude-code`` from npm, its native binary called
directly) run by ``claude -p`` against a scripted Anthropic Messages API on 127.0.0.1,
exporting OTLP/HTTP JSON logs and beta traces to a receiver on 127.0.0.1; the captured
``claude_code.*`` records go through the Claude Code reader and the engine.

Scenarios (``-details``: with ``OTEL_LOG_TOOL_DETAILS=1``; ``-default``: without it):

- ``loop``: the same Bash command with the same output six times. With details the
  arguments are known and only the result's size: caught as ``frequency`` on the identical
  request, marked ``progress.evidence_level = arguments``, never as a repeat cycle (equal
  sizes do not prove equal output). By default only names and success are known: no
  detection, by design (documented in docs/coding-agents.md).
- ``failing-command``: the same failing Bash command five times. With details it is the
  identical failing request (``error_recurrence`` at the third); by default the recurring
  error type (``ShellError``) at the fifth, at level ``names``.
- ``failing-edit``: the same Edit whose ``old_string`` is not in the file, four times.
  Claude Code rejects it while validating its input and logs nothing for it (no
  ``tool_result``, no span): the loop is invisible to its telemetry, and the test checks
  that absence.
- ``healthy``: different commands with new output each time: no detection.
- refused (:func:`test_real_cli_refused_calls_are_read_as_calls_that_never_ran`): the model
  asks five times for a Bash command a ``permissions.deny`` rule (``--settings``) refuses.
  Claude Code logs a ``tool_decision`` with ``decision = reject`` for each and no
  ``tool_result``: five calls that never ran, a run of refusals of the same action.

The captures are kept as golden files (``golden/claude-code-<version>-<scenario>.jsonl``,
``….traces.jsonl`` for the beta traces) so the golden tests run without the CLI;
``OTEL_PROGRESS_UPDATE_GOLDEN=1`` rewrites them from a fresh capture.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

import pytest

from otel_progress.conventions.logs import EVIDENCE_ARGUMENTS, EVIDENCE_NAMES
from otel_progress.conventions.spans import SpanKind, classify, read_tool_call
from otel_progress.evidence.content import command_of
from otel_progress.model import Reason
from otel_progress.otlp.files import spans_from_request

from .cli_capture import (
    GOLDEN,
    UPDATE_ENV,
    Receiver,
    brief,
    cli_env,
    detect,
    golden_file,
    npm_file,
    observations,
    read_records,
    run_cli,
    with_cwd,
    workspace,
    write_jsonl,
)
from .fake_anthropic import FakeAnthropic

VERSION = "2.1.332"
_PLATFORMS = {("Linux", "x86_64"): "linux-x64", ("Linux", "aarch64"): "linux-arm64"}

NOTES = "the first line\nthe second line\n"
_CAT = [("Bash", {"command": "cat notes.txt", "description": "Show the notes"})]
_CHECK = [("Bash", {"command": "ls notes.fixed", "description": "Check the fix"})]
_EDIT = [("Edit", {"file_path": "{cwd}/notes.txt", "old_string": "the line that is not there",
                   "new_string": "the line the agent wants"})]
_READ = [("Read", {"file_path": "{cwd}/notes.txt"})]

#: scenario -> (script of tool calls per model turn, OTEL_LOG_TOOL_DETAILS)
SCENARIOS: dict[str, tuple[list[list[tuple[str, dict[str, Any]]]], bool]] = {
    "loop-details": ([_CAT] * 6, True),
    "loop-default": ([_CAT] * 6, False),
    "failing-command-details": ([_CHECK] * 5, True),
    "failing-command-default": ([_CHECK] * 5, False),
    "failing-edit-details": ([_READ] + [_EDIT] * 4, True),
    "healthy-details": ([
        _CAT,
        [("Bash", {"command": "printf 'step two\\n' > todo.txt", "description": "Write the todo"})],
        [("Bash", {"command": "cat todo.txt", "description": "Show the todo"})],
        [("Bash", {"command": "wc -l notes.txt todo.txt", "description": "Count lines"})],
        [("Bash", {"command": "ls", "description": "List"})],
    ], True),
}

#: The ``claude_code.tool_result`` attributes the reader relies on, by setting.
READ_KEYS = frozenset({"tool_name", "tool_use_id", "success", "duration_ms", "session.id", "prompt.id",
                       "event.sequence", "tool_result_size_bytes"})
DETAIL_KEYS = frozenset({"tool_input"})


#: scenario -> the detections (reason, turn, evidence level), for the capture and its golden file
EXPECTED: dict[str, list[tuple[str, int, str | None]]] = {
    "loop-details": [("frequency", 4, EVIDENCE_ARGUMENTS)],
    "loop-default": [],
    "failing-command-details": [("error_recurrence", 3, EVIDENCE_ARGUMENTS)],
    "failing-command-default": [("error_recurrence", 5, EVIDENCE_NAMES)],
    "failing-edit-details": [],
    "healthy-details": [],
}


def golden(scenario: str, signal: str = "") -> Path:
    return GOLDEN / f"claude-code-{VERSION}-{scenario}{'.' + signal if signal else ''}.jsonl"


#: An older release whose spans carry no gen_ai.operation.name / gen_ai.tool.name (before 2.1.300).
OLD_VERSION = "2.1.197"


def claude_binary(version: str = VERSION) -> Path:
    """The real Claude Code native binary (installed from npm once, cached)."""
    name = _PLATFORMS.get((platform.system(), platform.machine()))
    if name is None:
        pytest.skip(f"no Claude Code native package for {platform.system()} {platform.machine()}")
    return npm_file("@anthropic-ai/claude-code", version, "claude-code", f"@anthropic-ai/claude-code-{name}/claude")


def capture(scenario: str, tmp_path: Path, exporter: dict[str, str] | None = None, version: str = VERSION,
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], FakeAnthropic]:
    """Run the CLI through one scenario; the logs and trace export requests it sent to the
    test's receiver (``exporter``: OTLP settings that send them elsewhere instead)."""
    script, details = SCENARIOS[scenario]
    return run_claude(script, details, tmp_path, exporter, version)


def run_claude(script: list[list[tuple[str, dict[str, Any]]]], details: bool, tmp_path: Path,
               exporter: dict[str, str] | None = None, version: str = VERSION, context: list[int] | None = None,
               settings: dict[str, str] | None = None, argv: list[str] | None = None,
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], FakeAnthropic]:
    """Run the CLI through a script of tool calls (``context``: the input tokens the fake API
    reports per turn, see :mod:`.fake_anthropic`; ``settings``: more environment; ``argv``:
    more command-line options, e.g. ``--settings`` with permission rules); the logs
    and trace export requests it sent (see :func:`capture`) and the fake API."""
    binary = claude_binary(version)
    work, home = workspace(tmp_path, NOTES)
    script = with_cwd(script, str(work))
    with Receiver() as receiver, FakeAnthropic(script, final_text="Finished.", context=context) as api:
        env = cli_env(
            home, LANG="C.UTF-8",
            ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="sk-ant-test-not-a-key",
            IS_SANDBOX="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            CLAUDE_CODE_ENABLE_TELEMETRY="1", OTEL_LOGS_EXPORTER="otlp", OTEL_METRICS_EXPORTER="none",
            OTEL_TRACES_EXPORTER="otlp", CLAUDE_CODE_ENHANCED_TELEMETRY_BETA="1",
            OTEL_EXPORTER_OTLP_PROTOCOL="http/json", OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_LOGS_EXPORT_INTERVAL="500", OTEL_BSP_SCHEDULE_DELAY="500",
        )
        if details:
            env["OTEL_LOG_TOOL_DETAILS"] = "1"
            env["OTEL_LOG_TOOL_CONTENT"] = "1"
        env.update(settings or {})
        env.update(exporter or {})
        run_cli([str(binary), "-p", "Work on notes.txt", "--output-format", "stream-json", "--verbose",
                 "--dangerously-skip-permissions", *(argv or [])],
                cwd=work, env=env, timeout=120, expect='"subtype":"success"')
        return list(receiver.requests["logs"]), list(receiver.requests["traces"]), api


def tool_results(path: Path) -> list[Any]:
    return [r for r in read_records(path) if r.event_name in ("claude_code.tool_result", "tool_result")]


# -- the real CLI ---------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_real_cli_capture_has_what_the_reader_relies_on(scenario: str, tmp_path: Path) -> None:
    logs, traces, api = capture(scenario, tmp_path)
    script, details = SCENARIOS[scenario]
    assert len([r for r in api.requests if r.get("tools")]) >= len(script)
    path = tmp_path / "logs.jsonl"
    write_jsonl(path, logs)
    results = tool_results(path)
    tools = [t for turn in script for t, _ in turn]
    logged = [t for t in tools if t != "Edit"]  # a rejected Edit is never logged (see the module)
    assert [r.attributes["tool_name"] for r in results] == logged
    for record in results:
        keys = set(record.attributes)
        if record.attributes.get("success") == "true":
            assert keys >= READ_KEYS, READ_KEYS - keys
        assert (keys >= DETAIL_KEYS) == details
    assert brief(path) == EXPECTED[scenario]
    if os.environ.get(UPDATE_ENV) == "1":
        write_jsonl(golden(scenario), logs)
        write_jsonl(golden(scenario, "traces"), traces)


# -- the golden files (no CLI needed) --------------------------------------------------------


def _golden(scenario: str) -> Path:
    return golden_file(golden(scenario).name)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_golden_file_gives_the_expected_detections(scenario: str) -> None:
    assert brief(_golden(scenario)) == EXPECTED[scenario]


def test_loop_with_details_is_caught_on_the_identical_request_at_arguments_level() -> None:
    dets = detect(_golden("loop-details"))
    assert [(d.reason, d.turn) for d in dets] == [(Reason.FREQUENCY, 4)]
    attrs = dets[0].event_attributes()
    assert attrs["progress.evidence_level"] == EVIDENCE_ARGUMENTS
    assert attrs["progress.tool"] == "Bash"
    assert all(o.evidence_level == EVIDENCE_ARGUMENTS for o in observations(_golden("loop-details"))
               if o.kind == "tool")


def test_loop_by_default_is_not_claimed_names_only() -> None:
    path = _golden("loop-default")
    assert {o.evidence_level for o in observations(path) if o.kind == "tool"} == {EVIDENCE_NAMES}
    assert detect(path) == []


def test_failing_command_with_details_is_the_identical_failing_request() -> None:
    dets = detect(_golden("failing-command-details"))
    assert [(d.reason, d.turn) for d in dets] == [(Reason.ERROR_RECURRENCE, 3)]
    attrs = dets[0].event_attributes()
    assert attrs["progress.identical_requests"] == 3
    assert attrs["progress.evidence_level"] == EVIDENCE_ARGUMENTS


def test_failing_command_by_default_is_the_recurring_error_type() -> None:
    dets = detect(_golden("failing-command-default"))
    assert [(d.reason, d.turn) for d in dets] == [(Reason.ERROR_RECURRENCE, 5)]
    attrs = dets[0].event_attributes()
    assert attrs["progress.evidence_level"] == EVIDENCE_NAMES
    assert "progress.identical_requests" not in attrs


def test_rejected_edits_leave_no_record() -> None:
    path = _golden("failing-edit-details")
    assert [r.attributes["tool_name"] for r in tool_results(path)] == ["Read"]
    assert detect(path) == []


def test_healthy_run_has_no_detection() -> None:
    path = _golden("healthy-details")
    assert len(tool_results(path)) == 5
    assert detect(path) == []


def test_tokens_come_from_api_requests() -> None:
    tokens = [o.tokens for o in observations(_golden("loop-details")) if o.kind == "tokens"]
    assert len(tokens) >= 7 and all(t == 150 for t in tokens)  # the fake API's 120 in + 30 out


def test_an_older_release_without_gen_ai_keys_is_read_from_its_traces(tmp_path: Path) -> None:
    """2.1.197 writes claude_code.tool spans with span.type and tool_name only (no
    gen_ai.operation.name, no gen_ai.tool.name): read by the Claude Code span convention,
    the loop is the same repeat cycle at the second call as with 2.1.332."""
    from otel_progress.scan import scan_paths

    _, traces, _ = capture("loop-details", tmp_path, version=OLD_VERSION)
    path = tmp_path / "traces.jsonl"
    write_jsonl(path, traces)
    tools = [s for line in path.read_text().splitlines() for rs in json.loads(line).get("resourceSpans", [])
             for ss in rs.get("scopeSpans", []) for s in ss.get("spans", []) if s["name"] == "claude_code.tool"]
    assert tools, "no claude_code.tool span was exported"
    keys = {a["key"] for a in tools[0].get("attributes", [])}
    assert "tool_name" in keys and "gen_ai.operation.name" not in keys and "gen_ai.tool.name" not in keys
    result = scan_paths([str(path)], progress=False)
    assert sum(r.tool_calls for r in result.reports) == len(tools)
    found = [(d.reason.value, d.turn) for r in result.reports for d in r.detections]
    assert found[:1] == [("repeat_cycle", 3)]  # (the command re-issued once is a re-check)
    if os.environ.get(UPDATE_ENV) == "1":
        write_jsonl(GOLDEN / f"claude-code-{OLD_VERSION}-loop-details.traces.jsonl", traces)


def test_a_bash_call_in_the_beta_traces_is_a_command() -> None:
    # tool.output's bash_command (OTEL_LOG_TOOL_CONTENT) or the span's full_command
    # (OTEL_LOG_TOOL_DETAILS) is the shell command: a wait (sleep 5 && tail log) is a poll,
    # and a failure's error key is the command's
    path = golden_file("claude-code-2.1.332-compaction-progress.traces.jsonl")
    commands = []
    for line in path.read_text().splitlines():
        for span in spans_from_request(json.loads(line)):
            if classify(span) is SpanKind.TOOL:
                commands.append(command_of(read_tool_call(span).arguments))
    assert "ls" in {c.strip() for c in commands if c} and commands.count(None) < len(commands)
    assert any(c and c.startswith("printf 'two\\n' > step1.txt") for c in commands), commands
    assert command_of({"full_command": "sleep 5 && tail build.log"}) == "sleep 5 && tail build.log"


# -- refusals --------------------------------------------------------------------------------


def test_real_cli_refused_calls_are_read_as_calls_that_never_ran(tmp_path: Path) -> None:
    """A ``permissions.deny`` rule refuses the command the model keeps asking for: each refusal
    is a ``tool_decision`` (``reject``, source ``config``) with no ``tool_result``, read as a
    call that never ran with the request's arguments, and the run of them is an
    ``unexecuted_repeat`` (the engine's signal; the refusals are never a repeat of calls that ran)."""
    deny = json.dumps({"permissions": {"deny": ["Bash(cat notes.txt)"]}})
    logs, _, api = run_claude([_CAT] * 5, True, tmp_path, argv=["--settings", deny])
    path = tmp_path / "logs.jsonl"
    write_jsonl(path, logs)
    if os.environ.get(UPDATE_ENV) == "1":
        write_jsonl(golden("refused-details"), logs)
    # the model was told each time: the CLI refused before running anything
    refusals = [block for request in api.requests for message in request.get("messages", [])
                if type(message.get("content")) is list for block in message["content"]
                if block.get("type") == "tool_result" and "denied" in str(block.get("content"))]
    assert len({block["tool_use_id"] for block in refusals}) == 5
    _assert_refusals_read(path)
    _assert_unexecuted_repeat(path)


def test_golden_refusals_are_calls_that_never_ran() -> None:
    _assert_refusals_read(_golden("refused-details"))


def test_golden_refusals_are_an_unexecuted_repeat() -> None:
    _assert_unexecuted_repeat(_golden("refused-details"))


def _assert_refusals_read(path: Path) -> None:
    assert tool_results(path) == []  # no tool_result for a refused call
    decisions = [r.attributes for r in read_records(path) if r.event_name in ("claude_code.tool_decision",
                                                                              "tool_decision")]
    assert [(d["decision"], d["source"]) for d in decisions] == [("reject", "config")] * 5
    calls = [o.call for o in observations(path) if o.kind == "tool" and o.call is not None]
    assert len(calls) == 5 and all(not c.executed for c in calls)
    assert {json.dumps(c.arguments, sort_keys=True) for c in calls} == {
        json.dumps({"command": "cat notes.txt", "description": "Show the notes"}, sort_keys=True)}
    assert all(c.evidence_level == EVIDENCE_ARGUMENTS for c in calls)
    # no executed call: nothing for the tool-call signals
    assert [d.reason for d in detect(path) if d.reason is not Reason.UNEXECUTED_REPEAT] == []


def _assert_unexecuted_repeat(path: Path) -> None:
    from otel_progress.scan import scan_paths

    # the engine's unexecuted_repeat signal (issue 29 item 3) catches the run of refusals
    found = [d.reason for r in scan_paths([str(path)], progress=False).reports for d in r.detections]
    assert Reason.UNEXECUTED_REPEAT in found, found  # (waits for the engine's signal)
