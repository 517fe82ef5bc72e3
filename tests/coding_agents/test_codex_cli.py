"""The real Codex CLI (``@openai/codex`` from npm, its native binary called directly) run
by ``codex exec`` against a scripted Responses API on 127.0.0.1, exporting OTLP/HTTP JSON
logs to a receiver on 127.0.0.1; the captured ``codex.tool_result`` records go through the
Codex reader and the engine.

Scenarios: ``loop`` (the same command, the same output, six times: caught with full
evidence), ``failing-edit`` (the same patch that does not apply, four times: caught as the
identical failing request), ``long-output`` (the same command five times, its output past
the 2 KiB telemetry preview and different after the cut: the equal previews never make a
repeat; only the identical request is claimed, marked ``evidence_level = arguments``),
``poll`` (a command still running after its yield time, polled with ``write_stdin`` until it
exits: a wait, no detection) and ``healthy`` (different commands, new output each time: no
detection). The captures are kept as golden files
(``golden/codex-<version>-<scenario>.jsonl``) so the golden tests run without the CLI;
``OTEL_PROGRESS_UPDATE_GOLDEN=1`` rewrites them from a fresh capture.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import pytest

from otel_progress.model import Reason

from .cli_capture import (
    GOLDEN,
    UPDATE_ENV,
    Receiver,
    assert_slim_detects_the_same,
    cli_env,
    common_keys,
    detect,
    golden_file,
    npm_file,
    observations,
    run_cli,
    same_detections,
    scan_detections,
    slim,
    workspace,
    write_jsonl,
)
from .fake_openai_responses import FakeResponsesAPI, Step

VERSION = "0.171.0"
_TRIPLES = {("Linux", "x86_64"): ("linux-x64", "x86_64-unknown-linux-musl"),
            ("Linux", "aarch64"): ("linux-arm64", "aarch64-unknown-linux-musl")}

PATCH = """apply_patch <<'EOF'
*** Begin Patch
*** Update File: notes.txt
@@
-the line that is not there
+the line the agent wants
*** End Patch
EOF"""

SCENARIOS: dict[str, list[Step]] = {
    "loop": [Step(command="cat notes.txt")] * 6 + [Step(message="The notes say the same thing.")],
    "failing-edit": [Step(command="cat notes.txt")] + [Step(command=PATCH)] * 4
    + [Step(message="The patch does not apply.")],
    # 14 KB, then a line that differs every time: past the 2 KiB telemetry preview
    "long-output": [Step(command="seq 1 3000; date +%s%N")] * 5 + [Step(message="Counted.")],
    # a build that takes a while, polled with write_stdin until it exits: waiting, not a loop
    # (Codex waits at least 5 s per empty write_stdin: two identical polls see it running)
    "poll": [Step(command="sleep 12; echo built", yield_ms=250)]
    + [Step(poll=True, yield_ms=1000, message="The build finished.")] * 12,
    "healthy": [
        Step(command="cat notes.txt"),
        Step(command="printf 'step two\\n' > todo.txt"),
        Step(command="cat todo.txt"),
        Step(command="wc -l notes.txt todo.txt"),
        Step(command="ls"),
        Step(message="All steps done."),
    ],
}


TOOL_RESULT = "codex.tool_result"
#: The ``codex.tool_result`` attributes the reader relies on.
READ_KEYS = frozenset({"tool_name", "call_id", "arguments", "success", "output", "duration_ms",
                       "conversation.id", "event.timestamp"})


def _binary() -> Path:
    triple = _TRIPLES.get((platform.system(), platform.machine()))
    if triple is None:
        pytest.skip(f"no Codex CLI binary for {platform.system()} {platform.machine()} in this test")
    package, target = triple
    return npm_file("@openai/codex", VERSION, "codex", f"@openai/codex-{package}/vendor/{target}/bin/codex")


def _config(api: FakeResponsesAPI, exporter: str) -> str:
    return f"""model = "scripted-model"
model_provider = "scripted"

[model_providers.scripted]
name = "scripted"
base_url = "{api.base_url}"
wire_api = "responses"
env_key = "SCRIPTED_API_KEY"

[otel]
exporter = {exporter}
"""


def http_exporter(endpoint: str) -> str:
    """The ``[otel] exporter`` value for OTLP/HTTP JSON logs to ``endpoint``."""
    return f'{{ otlp-http = {{ endpoint = "{endpoint}/v1/logs", protocol = "json" }} }}'


def grpc_exporter(endpoint: str) -> str:
    """The ``[otel] exporter`` value for OTLP/gRPC logs to ``endpoint`` (``host:port``)."""
    return f'{{ otlp-grpc = {{ endpoint = "http://{endpoint}" }} }}'


def run_codex(scenario: str, tmp: Path, exporter: str) -> None:
    """Run the scenario with the real CLI, its logs exported as ``exporter`` says."""
    binary = _binary()
    work, home = workspace(tmp, "alpha\nbeta\n", home="codex-home")
    with FakeResponsesAPI(SCENARIOS[scenario]) as api:
        (home / "config.toml").write_text(_config(api, exporter))
        env = cli_env(tmp, CODEX_HOME=str(home), SCRIPTED_API_KEY="not-a-key", NO_COLOR="1")
        run_cli([str(binary), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                 "--json", "-C", str(work), "Read notes.txt and act on it."],
                env=env, timeout=180, stdin=subprocess.DEVNULL, expect='"turn.completed"')


def capture(scenario: str, tmp: Path) -> Path:
    """Run the scenario with the real CLI; the path of the captured logs file."""
    with Receiver() as receiver:
        run_codex(scenario, tmp, http_exporter(receiver.endpoint))
        logs = list(receiver.requests["logs"])
    path = tmp / f"codex-{VERSION}-{scenario}.jsonl"
    write_jsonl(path, logs)
    if os.environ.get(UPDATE_ENV) == "1":
        write_jsonl(GOLDEN / path.name, slim(logs))
    return path


def check_scenario(scenario: str, path: Path) -> None:
    """What the reader and the engine must find in a capture of ``scenario``."""
    tools = [o.call for o in observations(path) if o.kind == "tool" and o.call is not None]
    tokens = [o for o in observations(path) if o.kind == "tokens"]
    assert tokens and all(t.tokens > 0 for t in tokens), "codex.sse_event response.completed counts"
    assert len({o.run_key for o in observations(path)}) == 1, "one conversation.id"
    assert all(c.name == ("write_stdin" if scenario == "poll" and i else "exec_command") for i, c in enumerate(tools))
    if scenario != "long-output":
        assert all(c.evidence_level == "full" and not c.result_truncated for c in tools)
    detections = detect(path)
    assert same_detections(scan_detections(path), detections), "otel-progress scan finds the same"
    if scenario == "poll":
        running = [c for c in tools if c.name == "write_stdin" and c.result == {"status": "running", "output": ""}]
        assert len(running) >= 2, "identical polls while it ran (as plain text: a repeat cycle)"
        assert "built" in str(tools[-1].result) and not any(c.error for c in tools)
        assert detections == [], detections
    elif scenario == "long-output":
        assert len(tools) == 5
        assert all(c.evidence_level == "arguments" and c.result_truncated for c in tools)
        assert len({c.result for c in tools}) == 1, "the previews are equal: the outputs differ after the cut"
        # equal previews never prove equal results: only the identical request is claimed
        assert all(d.reason is Reason.FREQUENCY for d in detections), detections
        assert all(d.event_attributes()["progress.evidence_level"] == "arguments" for d in detections)
    elif scenario == "loop":
        assert len(tools) == 6
        assert len({c.result for c in tools}) == 1, "identical outputs once chunk id and wall time are off"
        assert not any(c.error for c in tools)
        assert detections, "six identical commands with identical output"
        first = detections[0]
        assert first.reason in (Reason.REPEAT_CYCLE, Reason.FREQUENCY, Reason.BARREN, Reason.SIGNATURE_REPEAT)
        assert "progress.evidence_level" not in first.event_attributes()
        assert first.turn <= 4 and first.tool == "exec_command"
    elif scenario == "failing-edit":
        patches = [c for c in tools if "apply_patch" in str(c.arguments)]
        assert len(patches) == 4
        assert all(c.error for c in patches), "a patch that does not apply is a failure"
        assert len({c.error_message for c in patches}) == 1
        reasons = {d.reason for d in detections}
        assert Reason.ERROR_RECURRENCE in reasons, detections
        first = next(d for d in detections if d.reason is Reason.ERROR_RECURRENCE)
        assert first.figures.get("identical_requests") == 3 and first.turn == 4
    else:
        assert len(tools) == 5 and not any(c.error for c in tools)
        assert detections == [], detections


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_golden_capture(scenario: str) -> None:
    check_scenario(scenario, golden_file(f"codex-{VERSION}-{scenario}.jsonl"))


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_real_cli(scenario: str, tmp_path: Path) -> None:
    path = capture(scenario, tmp_path)
    check_scenario(scenario, path)
    assert_slim_detects_the_same(path, tmp_path)
    # the golden file still has every attribute the reader relies on, as the CLI does
    assert common_keys(path, TOOL_RESULT) >= READ_KEYS
    golden = GOLDEN / path.name
    if golden.exists():
        assert common_keys(golden, TOOL_RESULT) >= READ_KEYS
