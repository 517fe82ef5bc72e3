"""Refusals in the real Codex CLI (``codex exec``, as :mod:`.test_codex_cli` runs it): an
exec-policy rule in ``$CODEX_HOME/rules/default.rules`` forbids ``cat``
(``prefix_rule(pattern=["cat"], decision="forbidden")``) and the scripted model asks for
``cat notes.txt`` six times. Codex never runs it: each call's ``codex.tool_result`` has
``success = "false"``, its arguments, and the refusal wrapped in the process-creation error;
no ``codex.tool_decision`` is logged (nothing was asked). The reader makes each one a call
that never ran (``ToolCall.executed = False``), so the run of refusals is no failure of the
tool and no repeat of calls that ran; the engine's ``unexecuted_repeat`` catches it (that
assertion waits for the engine signal, issue 29 item 3). The capture is kept as
``golden/codex-<version>-refused.jsonl``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from otel_progress.model import Reason

from .cli_capture import (
    GOLDEN,
    UPDATE_ENV,
    Receiver,
    cli_env,
    detect,
    golden_file,
    observations,
    read_records,
    run_cli,
    slim,
    workspace,
    write_jsonl,
)
from .fake_openai_responses import FakeResponsesAPI, Step
from .test_codex_cli import VERSION, _binary, _config, http_exporter

STEPS = [Step(command="cat notes.txt")] * 6 + [Step(message="I cannot read the notes.")]
GOLDEN_NAME = f"codex-{VERSION}-refused.jsonl"


def _capture(tmp: Path) -> Path:
    binary = _binary()
    work, home = workspace(tmp, "alpha\nbeta\n", home="codex-home")
    (home / "rules").mkdir()
    (home / "rules" / "default.rules").write_text('prefix_rule(pattern=["cat"], decision="forbidden")\n')
    with Receiver() as receiver:
        with FakeResponsesAPI(STEPS) as api:
            (home / "config.toml").write_text(_config(api, http_exporter(receiver.endpoint)))
            env = cli_env(tmp, CODEX_HOME=str(home), SCRIPTED_API_KEY="not-a-key", NO_COLOR="1")
            run_cli([str(binary), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                     "--json", "-C", str(work), "Read notes.txt and act on it."],
                    env=env, timeout=180, stdin=subprocess.DEVNULL, expect='"turn.completed"')
        logs = list(receiver.requests["logs"])
    path = tmp / GOLDEN_NAME
    write_jsonl(path, logs)
    if os.environ.get(UPDATE_ENV) == "1":
        write_jsonl(GOLDEN / GOLDEN_NAME, slim(logs))
    return path


def _check_read(path: Path) -> None:
    records = [r.attributes for r in read_records(path) if r.attributes.get("event.name") == "codex.tool_result"]
    assert len(records) == 6 and all(a["success"] == "false" for a in records)
    assert all("rejected: policy forbids commands starting with `cat`" in a["output"] for a in records)
    assert not [r for r in read_records(path) if r.attributes.get("event.name") == "codex.tool_decision"]
    calls = [o.call for o in observations(path) if o.kind == "tool" and o.call is not None]
    assert len(calls) == 6 and all(not c.executed for c in calls)
    assert {str(c.arguments) for c in calls} == {str({"cmd": "cat notes.txt"})}
    # never ran: not a failure of the tool (error_recurrence) nor a repeat of calls that ran
    assert [d.reason for d in detect(path) if d.reason is not Reason.UNEXECUTED_REPEAT] == []


def _check_unexecuted_repeat(path: Path) -> None:
    # (waits for the engine's unexecuted_repeat signal)
    assert Reason.UNEXECUTED_REPEAT in [d.reason for d in detect(path)]


def test_real_cli_policy_refusals_are_calls_that_never_ran(tmp_path: Path) -> None:
    path = _capture(tmp_path)
    _check_read(path)
    _check_unexecuted_repeat(path)


def test_golden_policy_refusals_are_calls_that_never_ran() -> None:
    _check_read(golden_file(GOLDEN_NAME))


def test_golden_policy_refusals_are_an_unexecuted_repeat() -> None:
    _check_unexecuted_repeat(golden_file(GOLDEN_NAME))
