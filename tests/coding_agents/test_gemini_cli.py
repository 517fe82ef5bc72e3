"""The real Gemini CLI (``@google/gemini-cli`` from npm, its bundled ``gemini.js`` run by
node) in headless mode (``gemini -p ... --yolo --output-format stream-json``) against a
scripted Gemini API on 127.0.0.1 (``GOOGLE_GEMINI_BASE_URL``), exporting OTLP/HTTP JSON logs
and traces (``telemetry.traces``) to a receiver on 127.0.0.1; the captured
``gemini_cli.tool_call`` records go through the Gemini CLI reader and the engine.

Gemini's logs give a tool call's arguments but only the size of its result
(``content_length``): evidence ``arguments``. What that can prove: the identical request
failing the same way (``failing-edit``: the same ``replace`` whose text is not in the file,
four times: ``error_recurrence``); the identical request again and again (``loop``: two
commands in turn, four times each) is claimed only as ``frequency`` of the identical request, marked
``progress.evidence_level = arguments``; ``healthy`` (different commands) is clean. The
captures are kept as golden files (``golden/gemini-cli-<version>-<scenario>.jsonl``, and
``...-<scenario>.traces.jsonl`` for the spans); ``OTEL_PROGRESS_UPDATE_GOLDEN=1`` rewrites
them from a fresh capture.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from otel_progress.model import NOT_CAPTURED, Reason

from .cli_capture import (
    GOLDEN,
    UPDATE_ENV,
    Receiver,
    assert_slim_detects_the_same,
    cli_env,
    common_keys,
    detect,
    golden_file,
    node,
    npm_file,
    observations,
    run_cli,
    same_detections,
    scan_detections,
    slim,
    workspace,
    write_jsonl,
)
from .fake_gemini import FakeGeminiAPI, Step
from .test_gemini_traces import check_traces

VERSION = "0.61.0"
SHELL = "run_shell_command"
EDIT = {"file_path": "notes.txt", "instruction": "Replace the missing line.",
        "old_string": "the line that is not there", "new_string": "the line the agent wants"}

SCENARIOS: dict[str, list[Step]] = {
    # two commands in turn (Gemini CLI's own detector stops the fifth identical call in a row)
    "loop": [Step(tool=SHELL, args={"command": "cat notes.txt"}), Step(tool=SHELL, args={"command": "ls"})] * 4
    + [Step(message="Same notes.")],
    "failing-edit": [Step(tool=SHELL, args={"command": "cat notes.txt"})] + [Step(tool="replace", args=EDIT)] * 4
    + [Step(message="The edit does not apply.")],
    # logPrompts off: five different edits that all fail the same way
    "edits-no-prompts": [Step(tool=SHELL, args={"command": "cat notes.txt"})]
    + [Step(tool="replace", args={**EDIT, "old_string": f"missing line {n}"}) for n in range(5)]
    + [Step(message="None of the edits apply.")],
    "healthy": [
        Step(tool=SHELL, args={"command": "cat notes.txt"}),
        Step(tool=SHELL, args={"command": "printf 'step two\\n' > todo.txt"}),
        Step(tool=SHELL, args={"command": "cat todo.txt"}),
        Step(tool=SHELL, args={"command": "wc -l notes.txt todo.txt"}),
        Step(tool=SHELL, args={"command": "ls"}),
        Step(message="All steps done."),
    ],
}

#: Scenarios run with ``logPrompts: false`` (no arguments in the logs, no content in the spans).
NO_PROMPTS = frozenset({"edits-no-prompts"})
TOOL_CALL = "gemini_cli.tool_call"
#: The ``gemini_cli.tool_call`` attributes the reader relies on.
READ_KEYS = frozenset({"function_name", "function_args", "success", "prompt_id", "content_length", "duration_ms",
                       "session.id", "event.timestamp"})


def _entry() -> tuple[str, Path]:
    return node(), npm_file("@google/gemini-cli", VERSION, "gemini-cli", "@google/gemini-cli/bundle/gemini.js")


def run_gemini(scenario: str, tmp: Path, endpoint: str, protocol: str = "http", traces: bool = True) -> None:
    """Run the scenario with the real CLI, its telemetry exported to ``endpoint`` over
    OTLP/HTTP (``protocol="http"``) or OTLP/gRPC (``"grpc"``)."""
    node_path, entry = _entry()
    work, home = workspace(tmp, "alpha\nbeta\n")
    (home / ".gemini").mkdir()
    with FakeGeminiAPI(SCENARIOS[scenario]) as api:
        settings = {
            "telemetry": {"enabled": True, "target": "local", "otlpEndpoint": endpoint,
                          "otlpProtocol": protocol, "traces": traces,
                          "logPrompts": scenario not in NO_PROMPTS},
            "security": {"auth": {"selectedType": "gemini-api-key"}},
        }
        (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
        env = cli_env(home, NO_COLOR="1", GOOGLE_GEMINI_BASE_URL=api.base_url, GEMINI_API_KEY="not-a-key")
        run_cli([node_path, str(entry), "-p", "Read notes.txt and act on it.", "--yolo", "--skip-trust",
                 "--output-format", "stream-json"],
                cwd=work, env=env, timeout=240, stdin=subprocess.DEVNULL, expect='"type":"result"')


def capture(scenario: str, tmp: Path) -> tuple[Path, Path]:
    """Run the scenario with the real CLI; the paths of the captured logs and traces."""
    with Receiver() as receiver:
        run_gemini(scenario, tmp, receiver.endpoint)
        logs, traces = list(receiver.requests["logs"]), list(receiver.requests["traces"])
    paths = tmp / f"gemini-cli-{VERSION}-{scenario}.jsonl", tmp / f"gemini-cli-{VERSION}-{scenario}.traces.jsonl"
    write_jsonl(paths[0], logs)
    write_jsonl(paths[1], traces)
    if os.environ.get(UPDATE_ENV) == "1":
        write_jsonl(GOLDEN / paths[0].name, slim(logs))
        write_jsonl(GOLDEN / paths[1].name, slim(traces))
    return paths


def check_scenario(scenario: str, path: Path) -> None:
    """What the reader and the engine must find in a logs capture of ``scenario``."""
    found = observations(path)
    tools = [o.call for o in found if o.kind == "tool" and o.call is not None]
    assert any(o.kind == "tokens" and o.tokens > 0 for o in found), "gemini_cli.api_response counts"
    assert len({o.run_key for o in found}) == 1, "one session.id and prompt_id"
    level = "names" if scenario in NO_PROMPTS else "arguments"
    assert all(c.evidence_level == level for c in tools)
    detections = detect(path)
    assert same_detections(scan_detections(path), detections), "otel-progress scan finds the same"
    if scenario == "loop":
        assert len(tools) == 8 and not any(c.error for c in tools)
        assert len({json.dumps(c.arguments, sort_keys=True) for c in tools}) == 2
        assert detections, "the same two requests four times each"
        # ls's fourth call (the first cat was counted apart: the new ls after it might have
        # changed what cat returns, sizes cannot tell)
        assert detections[0].turn == 8 and detections[0].figures.get("count") == 4
        for detection in detections:
            assert detection.event_attributes()["progress.evidence_level"] == "arguments"
            # equal sizes never prove equal results: only the identical request is claimed
            assert detection.reason is Reason.FREQUENCY, detection
    elif scenario == "failing-edit":
        edits = [c for c in tools if c.name == "replace"]
        assert len(edits) == 4 and all(c.error for c in edits)
        first = next(d for d in detections if d.reason is Reason.ERROR_RECURRENCE)
        assert first.figures.get("identical_requests") == 3 and first.turn == 4
    elif scenario == "edits-no-prompts":
        edits = [c for c in tools if c.name == "replace"]
        assert len(edits) == 5 and all(c.error and c.arguments is NOT_CAPTURED for c in edits)
        # names only: the recurring error (by signature), never "identical requests"
        assert [(d.reason, d.turn) for d in detections] == [(Reason.ERROR_RECURRENCE, 6)]
        attributes = detections[0].event_attributes()
        assert attributes["progress.evidence_level"] == "names" and attributes["progress.count"] == 5
        assert "progress.identical_requests" not in attributes
    else:
        assert len(tools) == 5 and not any(c.error for c in tools)
        assert detections == [], detections


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_golden_capture(scenario: str) -> None:
    check_scenario(scenario, golden_file(f"gemini-cli-{VERSION}-{scenario}.jsonl"))


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_real_cli(scenario: str, tmp_path: Path) -> None:
    logs, traces = capture(scenario, tmp_path)
    check_scenario(scenario, logs)
    if scenario in NO_PROMPTS:
        # without logPrompts the spans carry neither the request nor the response
        assert not scan_detections(traces), "nothing to compare, failures not visible"
    else:
        check_traces(scenario, traces)
    assert_slim_detects_the_same(logs, tmp_path)
    # the golden file still has every attribute the reader relies on, as the CLI does
    keys = READ_KEYS - {"function_args"} if scenario in NO_PROMPTS else READ_KEYS
    assert common_keys(logs, TOOL_CALL) >= keys
    golden = GOLDEN / logs.name
    if golden.exists():
        assert common_keys(golden, TOOL_CALL) >= keys
