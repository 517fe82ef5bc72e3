"""The real Qwen Code CLI (``@qwen-code/qwen-code`` from npm, its ``cli.js`` run by node) in
headless mode (``qwen -p … --yolo --auth-type openai --openai-base-url …``) against a
scripted OpenAI Chat Completions API on 127.0.0.1, exporting OTLP/HTTP JSON logs and traces
(``QWEN_TELEMETRY_*`` settings, ``includeSensitiveSpanAttributes`` on) to a receiver on
127.0.0.1.

Scenarios:

- ``loop``: two shell commands in turn, the same output each time, six laps (Qwen Code's
  own guard halts a run at the fourth consecutive identical call, so the loop alternates,
  as real loops often do). The ``qwen-code.tool_call``
  logs carry the whole arguments but only the result's length (level ``arguments``):
  caught as ``frequency`` on the identical request, never a repeat cycle. The
  ``qwen-code.tool`` spans with sensitive attributes carry ``gen_ai.tool.call.result``
  (level ``full``): ``scan`` catches a repeat cycle.
- ``failing-edit``: the file is read, then the same ``edit`` whose ``old_string`` is not in
  it, four times: the identical failing request (``error_recurrence`` at the third edit).
- ``healthy``: different commands with new output each time: no detection.

Qwen Code's shell tool sometimes reports a command's output as ``(empty)`` (a race in its
output capture, seen with 0.24.4), so the real-CLI test asserts the kind of detection and
the golden files their exact turns. Golden files: ``golden/qwen-code-<version>-<scenario>
.jsonl`` (logs) and ``….traces.jsonl``; ``OTEL_PROGRESS_UPDATE_GOLDEN=1`` rewrites them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from otel_progress.conventions.logs import EVIDENCE_ARGUMENTS
from otel_progress.scan import scan_paths

from .cli_capture import (
    GOLDEN,
    UPDATE_ENV,
    Receiver,
    brief,
    cli_env,
    golden_file,
    node,
    npm_file,
    observations,
    read_records,
    run_cli,
    with_cwd,
    workspace,
    write_jsonl,
)
from .fake_openai_chat import FakeOpenAIChat

VERSION = "0.24.4"
MODEL = "qwen3-coder-plus"
NOTES = "the first line\nthe second line\n"
_CAT = [("run_shell_command", {"command": "cat notes.txt", "description": "Show the notes"})]
_LS = [("run_shell_command", {"command": "ls", "description": "List the files"})]
_READ = [("read_file", {"file_path": "{cwd}/notes.txt"})]
_EDIT = [("edit", {"file_path": "{cwd}/notes.txt", "old_string": "the line that is not there",
                   "new_string": "the line the agent wants"})]

SCENARIOS: dict[str, list[list[tuple[str, dict[str, Any]]]]] = {
    "loop": [_CAT, _LS] * 6,
    "failing-edit": [_READ] + [_EDIT] * 4,
    "healthy": [
        _CAT,
        [("run_shell_command", {"command": "printf 'step two\\n' > todo.txt", "description": "Write the todo"})],
        [("run_shell_command", {"command": "cat todo.txt", "description": "Show the todo"})],
        [("run_shell_command", {"command": "wc -l notes.txt todo.txt", "description": "Count lines"})],
        [("run_shell_command", {"command": "ls", "description": "List"})],
    ],
}

#: scenario -> detections from the logs (reason, earliest turn, evidence level)
EXPECTED_LOGS: dict[str, list[tuple[str, int, str | None]]] = {
    "loop": [("frequency", 8, EVIDENCE_ARGUMENTS)],  # ls's fourth call
    "failing-edit": [("error_recurrence", 4, EVIDENCE_ARGUMENTS)],
    "healthy": [],
}

#: The ``qwen-code.tool_call`` attributes the reader relies on.
READ_KEYS = frozenset({"function_name", "function_args", "status", "success", "duration_ms", "call_id",
                       "prompt_id", "session.id"})


def golden(scenario: str, signal: str = "") -> Path:
    return GOLDEN / f"qwen-code-{VERSION}-{scenario}{'.' + signal if signal else ''}.jsonl"


def scan_brief(path: Path) -> list[tuple[str, int]]:
    result = scan_paths([str(path)], progress=False)
    return [(d.reason.value, d.turn) for r in result.reports for d in r.detections]


def _cli() -> tuple[str, Path]:
    return node(), npm_file("@qwen-code/qwen-code", VERSION, "qwen-code", "@qwen-code/qwen-code/cli.js")


def capture(scenario: str, tmp_path: Path, exporter: dict[str, str] | None = None,
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run the CLI through one scenario; the logs and trace export requests it sent to the
    test's receiver (``exporter``: telemetry settings that send them elsewhere instead)."""
    node_path, cli = _cli()
    work, home = workspace(tmp_path, NOTES)
    script = with_cwd(SCENARIOS[scenario], str(work))
    with Receiver() as receiver, FakeOpenAIChat(script, final_text="Finished.", model=MODEL) as api:
        env = cli_env(
            home, LANG="C.UTF-8",
            OPENAI_API_KEY="sk-test-not-a-key", OPENAI_BASE_URL=api.url, OPENAI_MODEL=MODEL,
            QWEN_TELEMETRY_ENABLED="true", QWEN_TELEMETRY_TARGET="local",
            QWEN_TELEMETRY_OTLP_ENDPOINT=receiver.endpoint, QWEN_TELEMETRY_OTLP_PROTOCOL="http",
            QWEN_TELEMETRY_INCLUDE_SENSITIVE_SPAN_ATTRIBUTES="true", QWEN_CODE_SUPPRESS_YOLO_WARNING="1",
        )
        env.update(exporter or {})
        run_cli([node_path, str(cli), "-p", "Work on notes.txt", "--yolo", "--auth-type", "openai",
                 "--openai-base-url", api.url, "--openai-api-key", "sk-test-not-a-key", "-m", MODEL,
                 "--output-format", "stream-json"], cwd=work, env=env, timeout=180, expect='"subtype":"success"')
        assert len([r for r in api.requests if r.get("tools")]) > len(script)
        return list(receiver.requests["logs"]), list(receiver.requests["traces"])


def tool_calls(path: Path) -> list[Any]:
    return [r for r in read_records(path) if r.event_name == "qwen-code.tool_call"]


# -- the real CLI ---------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_real_cli_capture_has_what_the_reader_relies_on(scenario: str, tmp_path: Path) -> None:
    logs, traces = capture(scenario, tmp_path)
    path, traces_path = tmp_path / "logs.jsonl", tmp_path / "traces.jsonl"
    write_jsonl(path, logs)
    write_jsonl(traces_path, traces)
    calls = tool_calls(path)
    assert [r.attributes["function_name"] for r in calls] == [t for turn in SCENARIOS[scenario] for t, _ in turn]
    for record in calls:
        assert set(record.attributes) >= READ_KEYS, READ_KEYS - set(record.attributes)
    # the kind of detection (the turns may move when the shell tool reports "(empty)")
    assert [(r, level) for r, _, level in brief(path)] == [(r, level) for r, _, level in EXPECTED_LOGS[scenario]]
    if scenario == "healthy":
        assert scan_brief(traces_path) == []
    else:
        assert scan_brief(traces_path)
    if os.environ.get(UPDATE_ENV) == "1":
        write_jsonl(golden(scenario), logs)
        write_jsonl(golden(scenario, "traces"), traces)


# -- the golden files (no CLI needed) --------------------------------------------------------


def _golden(scenario: str, signal: str = "") -> Path:
    return golden_file(golden(scenario, signal).name)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_golden_logs_give_the_expected_detections(scenario: str) -> None:
    found = brief(_golden(scenario))
    assert [(r, level) for r, _, level in found] == [(r, level) for r, _, level in EXPECTED_LOGS[scenario]]
    for (_, turn, _), (_, earliest, _) in zip(found, EXPECTED_LOGS[scenario], strict=True):
        # the earliest turn possible; an output reported as "(empty)" has another length
        # and moves the count on (the capture kept has one such call)
        assert earliest <= turn <= earliest + 4


def test_golden_logs_are_arguments_evidence_with_tokens() -> None:
    items = observations(_golden("loop"))
    assert {o.evidence_level for o in items if o.kind == "tool"} == {EVIDENCE_ARGUMENTS}
    tokens = [o.tokens for o in items if o.kind == "tokens"]
    assert len(tokens) > 8 and all(t == 175 for t in tokens)  # the fake API's 150 in + 25 out


def test_golden_traces_loop_is_a_repeat_cycle_with_full_content() -> None:
    found = scan_brief(_golden("loop", "traces"))
    assert found and found[0][0] == "repeat_cycle"


def test_golden_traces_failing_edit_is_error_recurrence() -> None:
    found = scan_brief(_golden("failing-edit", "traces"))
    assert found and found[0][0] == "error_recurrence"


def test_golden_traces_healthy_has_no_detection() -> None:
    assert scan_brief(_golden("healthy", "traces")) == []
