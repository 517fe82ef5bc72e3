"""Gemini CLI's own loop check next to ours: the real CLI (``gemini -p``, as in
:mod:`.test_gemini_cli`) asked by the scripted model for the same command again and again.
Gemini CLI's ``LoopDetectionService`` logs ``loop_detected`` (``loop_type =
consecutive_identical_tool_calls``) at the fifth identical call in a row; the reader keeps
it as a verdict of the prompt's run, never as a detection, and a detection of ours made
after it on that run carries it (``progress.corroborated_by = gemini_cli.loop_detected``):
one report per loop (docs/detection.md, "Other detectors' verdicts")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from otel_progress.model.verdicts import GEMINI_CLI

from .cli_capture import (
    GOLDEN,
    UPDATE_ENV,
    Receiver,
    detect,
    golden_file,
    observations,
    read_records,
    scan_detections,
    slim,
    write_jsonl,
)
from .fake_gemini import Step
from .test_gemini_cli import SCENARIOS, SHELL, run_gemini

SCENARIO = "own-loop-check"
GOLDEN_NAME = f"gemini-cli-0.61.0-{SCENARIO}.jsonl"
STEPS = [Step(tool=SHELL, args={"command": "cat notes.txt"})] * 12 + [Step(message="Same notes.")]


def _capture(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setitem(SCENARIOS, SCENARIO, STEPS)
    with Receiver() as receiver:
        run_gemini(SCENARIO, tmp, receiver.endpoint, traces=False)
        logs = list(receiver.requests["logs"])
    path = tmp / "logs.jsonl"
    write_jsonl(path, logs)
    if os.environ.get(UPDATE_ENV) == "1":
        write_jsonl(GOLDEN / GOLDEN_NAME, slim(logs))
    return path


def test_real_cli_loop_check_is_a_verdict_our_later_detections_carry(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _check(_capture(tmp_path, monkeypatch))


def test_golden_loop_check_is_a_verdict_our_later_detections_carry() -> None:
    _check(golden_file(GOLDEN_NAME))


def _check(path: Path) -> None:
    records = [r for r in read_records(path) if r.event_name in ("loop_detected", "gemini_cli.loop_detected")]
    assert records, "Gemini CLI logged no loop_detected"
    first = records[0]
    assert first.attributes.get("loop_type") == "consecutive_identical_tool_calls"
    assert first.scope == "gemini-cli" and first.attributes.get("prompt_id") == ""  # (0.61.0: the session only)
    found = observations(path)
    verdicts = [o.verdict for o in found if o.kind == "verdict" and o.verdict is not None]
    assert [(v.source, v.kind) for v in verdicts][:1] == [(GEMINI_CLI, "consecutive_identical_tool_calls")]
    tools = {o.run_key for o in found if o.kind == "tool"}
    assert len(tools) == 1 and all(o.session_wide and next(iter(tools)).startswith(o.run_key)
                                   for o in found if o.kind == "verdict")  # the session's run
    dets = scan_detections(path)
    assert dets, "our detector caught the repeated request"
    # never a detection of its own: every detection of ours is an engine reason
    assert all(d.reason.value != GEMINI_CLI for d in dets)
    # strike 1 (recovery) and strike 2 (the session ends) at the fifth request, after four
    # executed calls; ours, the identical request at the fourth, made once the run's calls
    # are evaluated (after the verdict was read): one report of the loop, carrying theirs
    assert [(v.kind, v.count) for v in verdicts] == [("consecutive_identical_tool_calls", 1),
                                                     ("consecutive_identical_tool_calls", 2)]
    assert [(d.reason.value, d.turn, d.figures.get("corroborated_by"), d.figures.get("corroborating_turn"))
            for d in dets] == [("frequency", 4, GEMINI_CLI, 4)]
    attributes = dets[0].event_attributes()
    assert attributes["progress.corroborated_by"] == GEMINI_CLI
    assert attributes["progress.corroborating_kind"] == "consecutive_identical_tool_calls"
    assert len(detect(path)) == len(dets)  # (the engine alone: the same detection, without the verdict)


def test_golden_loop_check_through_serve_and_the_scan_command_is_one_report() -> None:
    from .scan_serve import scan_cli, serve_detections

    path = golden_file(GOLDEN_NAME)
    events, marked = serve_detections(path)
    assert [(e["progress.reason"], e["progress.turn"], e["progress.corroborated_by"]) for e in events] == [
        ({"stringValue": "frequency"}, {"intValue": "4"}, {"stringValue": GEMINI_CLI})]
    assert len(marked) == 1  # the fourth tool_call record; Gemini's own loop_detected is forwarded as it was
    _status, found = scan_cli(path)
    assert [(d["reason"], d["turn"], d["figures"].get("corroborated_by")) for d in found] == [
        ("frequency", 4, GEMINI_CLI)]
