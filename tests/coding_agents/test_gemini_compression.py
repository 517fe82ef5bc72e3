"""The real Gemini CLI compressing its history (``gemini_cli.chat_compression``) against the
scripted Gemini API, logs and traces to a receiver on 127.0.0.1.

Gemini CLI compresses before a turn when the last prompt's ``promptTokenCount`` passes
``compressionThreshold`` (0.5) of the model's token limit (1,048,576), and only where the
history has a user message to split at: a second prompt. So each scenario is two prompts
of one session, the second through ``--resume latest``; the fake API reports 700,000
prompt tokens for the turns after which it should compress (``context``, see
:mod:`.fake_gemini`). Its summariser asks twice for a ``<state_snapshot>`` (a draft and a
check); then it logs ``gemini_cli.chat_compression`` (``tokens_before``, ``tokens_after``,
``session.id``, no ``prompt_id``).

Scenarios (golden files ``golden/gemini-cli-<version>-compression-<scenario>.jsonl`` and
``….traces.jsonl``; ``OTEL_PROGRESS_UPDATE_GOLDEN=1`` rewrites them):

- ``loop``: the same two commands in turn, compressing in the middle of the loop.
- ``spiral``: the same two reads again and again, compressing after each pair.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from otel_progress import Config
from otel_progress.scan import scan_paths

from .cli_capture import (
    GOLDEN,
    UPDATE_ENV,
    Receiver,
    cli_env,
    detect,
    golden_file,
    observations,
    run_cli,
    same_detections,
    scan_detections,
    serving,
    slim,
    workspace,
    write_jsonl,
)
from .fake_gemini import FakeGeminiAPI, Step
from .scan_serve import scan_cli, serve_detections
from .test_gemini_cli import SHELL, VERSION, _entry

#: Prompt tokens the fake reports for a turn after which Gemini CLI compresses.
FULL = 700_000
_LOW = 900

CAT = Step(tool=SHELL, args={"command": "cat notes.txt"})
LIST = Step(tool=SHELL, args={"command": "ls"})
COUNT = Step(tool=SHELL, args={"command": "wc -l notes.txt"})
PROMPTS = ("Read notes.txt.", "Now act on it.")


def _scenarios() -> dict[str, tuple[list[Step], set[int]]]:
    first = [CAT, LIST, Step(message="Read.")]  # the first prompt
    loop = first + [CAT, LIST] * 4 + [Step(message="Same notes.")]
    spiral = first + [CAT, COUNT] * 4 + [Step(message="Same notes.")]
    # (0-based steps of the whole script whose answer reports a full context)
    return {"loop": (loop, {6}), "spiral": (spiral, {4, 6, 8, 10})}


SCENARIOS = _scenarios()
#: scenario -> the compressions Gemini CLI performs
COMPRESSIONS = {"loop": 1, "spiral": 4}


def golden(scenario: str, signal: str = "") -> Path:
    return GOLDEN / f"gemini-cli-{VERSION}-compression-{scenario}{'.' + signal if signal else ''}.jsonl"


def run_gemini_session(scenario: str, tmp: Path, endpoint: str, protocol: str = "http",
                       traces: bool = True) -> FakeGeminiAPI:
    """Run the scenario's two prompts (the second resumes the session) with the real CLI,
    its telemetry exported to ``endpoint``; the fake API (its compressions)."""
    node_path, entry = _entry()
    steps, full = SCENARIOS[scenario]
    work, home = workspace(tmp, "alpha\nbeta\n")
    (home / ".gemini").mkdir()
    context = [FULL if i in full else _LOW for i in range(len(steps))]
    with FakeGeminiAPI(steps, context=context) as api:
        settings = {
            "telemetry": {"enabled": True, "target": "local", "otlpEndpoint": endpoint,
                          "otlpProtocol": protocol, "traces": traces, "logPrompts": True},
            "security": {"auth": {"selectedType": "gemini-api-key"}},
        }
        (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
        env = cli_env(home, NO_COLOR="1", GOOGLE_GEMINI_BASE_URL=api.base_url, GEMINI_API_KEY="not-a-key")
        for resume, prompt in zip(([], ["--resume", "latest"]), PROMPTS, strict=True):
            run_cli([node_path, str(entry), *resume, "-p", prompt, "--yolo", "--skip-trust",
                     "--output-format", "stream-json"],
                    cwd=work, env=env, timeout=240, stdin=subprocess.DEVNULL, expect='"type":"result"')
    return api


def capture(scenario: str, tmp: Path) -> tuple[Path, Path, FakeGeminiAPI]:
    """Run the scenario with the real CLI; the captured logs and traces, and the fake API."""
    with Receiver() as receiver:
        api = run_gemini_session(scenario, tmp, receiver.endpoint)
        logs, traces = list(receiver.requests["logs"]), list(receiver.requests["traces"])
    paths = tmp / golden(scenario).name, tmp / golden(scenario, "traces").name
    write_jsonl(paths[0], logs)
    write_jsonl(paths[1], traces)
    if os.environ.get(UPDATE_ENV) == "1":
        write_jsonl(golden(scenario), slim(logs))
        write_jsonl(golden(scenario, "traces"), slim(traces))
    return paths[0], paths[1], api


def compressions(path: Path) -> list:
    """The compaction observations the Gemini CLI reader finds in a logs file."""
    return [o for o in observations(path) if o.kind == "compaction"]


def check_capture(scenario: str, logs: Path) -> None:
    found = compressions(logs)
    assert len(found) == COMPRESSIONS[scenario]
    tools = [o for o in observations(logs) if o.kind == "tool"]
    sessions = {o.run_key.split("|")[1] for o in tools}
    assert len(sessions) == 1, "both prompts are one session"
    session = next(iter(sessions))
    for observation in found:
        compaction = observation.compaction
        assert observation.session_wide and observation.run_key == f"gemini_cli|{session}|"
        assert compaction.source == "gemini_cli.chat_compression"
        assert compaction.tokens_before == FULL and 0 < compaction.tokens_after < FULL
        assert compaction.trigger is None, "the record does not say"


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_real_cli_compresses(scenario: str, tmp_path: Path) -> None:
    logs, _traces, api = capture(scenario, tmp_path)
    # the summariser asks twice per compression (a draft, then a check)
    assert len(api.compressions) == 2 * COMPRESSIONS[scenario]
    check_capture(scenario, logs)
    assert _brief(detect(logs)) == EXPECTED[scenario]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_golden_files_hold_the_compressions(scenario: str) -> None:
    check_capture(scenario, golden_file(golden(scenario).name))


# -- detection ---------------------------------------------------------------------------------

#: scenario -> (reason, turn, evidence level) in the logs (arguments known, results by size)
EXPECTED = {
    "loop": [("frequency", 8, "arguments")],  # the same as with compactions ignored: the loop is one loop
    "spiral": [("compaction_livelock", 8, "arguments")],  # at the third compression
}
#: with compactions ignored (``disabled_signals: [compaction]``)
WITHOUT_BOUNDARY = {
    "loop": [("frequency", 8)],
    "spiral": [("frequency", 10)],  # the re-reads counted as repeats, later
}


def _brief(detections: list) -> list[tuple[str, int, str | None]]:
    return [(d.reason.value, d.turn, d.figures.get("evidence_level")) for d in detections]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_golden_logs_give_the_expected_detections(scenario: str) -> None:
    path = golden_file(golden(scenario).name)
    assert _brief(detect(path)) == EXPECTED[scenario]
    off = Config(disabled_signals=frozenset({"compaction"}))
    assert [(d.reason.value, d.turn) for d in detect(path, off)] == WITHOUT_BOUNDARY[scenario]
    assert same_detections(scan_detections(path), detect(path)), "otel-progress scan finds the same"
    status, found = scan_cli(path)
    assert [(d["reason"], d["turn"], d["figures"].get("evidence_level")) for d in found] == EXPECTED[scenario]
    assert status == 1


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_golden_logs_through_serve(scenario: str) -> None:
    events, marked = serve_detections(golden_file(golden(scenario).name))
    assert [(e["progress.reason"]["stringValue"], int(e["progress.turn"]["intValue"]),
             e.get("progress.evidence_level", {}).get("stringValue")) for e in events] == EXPECTED[scenario]
    expected = "gemini_cli.chat_compression" if scenario == "spiral" else "gemini_cli.tool_call"
    assert [m["event.name"] for m in marked] == [{"stringValue": expected}]


def test_the_traces_carry_no_boundary() -> None:
    """0.61.0's spans do not mark a compression: the traces are read as without one."""
    path = golden_file(golden("spiral", "traces").name)
    on = scan_paths([str(path)], progress=False)
    off = scan_paths([str(path)], Config(disabled_signals=frozenset({"compaction"})), progress=False)
    assert [(d.reason, d.turn) for r in on.reports for d in r.detections] == [
        (d.reason, d.turn) for r in off.reports for d in r.detections]


def test_the_real_spiral_through_serve(tmp_path: Path) -> None:
    """The real CLI's logs over OTLP/gRPC straight to ``otel-progress serve``: the livelock
    arrives as a ``progress.livelock`` record, on the third ``chat_compression`` record."""
    with serving() as (sink, service):
        run_gemini_session("spiral", tmp_path, f"http://127.0.0.1:{service.port}", protocol="grpc", traces=False)
        records = sink.wait(lambda r: any(name == "progress.livelock" for name, _ in r), timeout=20, settle=0.5)
    logged = [a for name, a in records if name == "progress.livelock"]
    assert [(a["progress.reason"], a["progress.turn"], a["progress.evidence_level"]) for a in logged] == [
        ("compaction_livelock", 8, "arguments")]
    marked = [a for name, a in records if name == "gemini_cli.chat_compression" and a.get("progress.detected")]
    assert len(marked) == 1
