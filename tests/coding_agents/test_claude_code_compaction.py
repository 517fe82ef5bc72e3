"""The real Claude Code CLI compacting its context (auto-compaction) against the scripted
Anthropic API, with ``OTEL_LOG_TOOL_DETAILS=1`` and the beta traces with tool content.

Claude Code compacts when the conversation nears its auto-compact window: the tests set
``CLAUDE_CODE_AUTO_COMPACT_WINDOW=100000`` (the smallest window it accepts) and the fake
API reports 95,000 input tokens for the turns after which it should compact
(``context``, see :mod:`.fake_anthropic`). It then sends its summarising request
(``query_source = compact``), logs ``claude_code.compaction`` (``trigger = auto``,
``success``, ``pre_tokens``, ``post_tokens``) and goes on from the summary.

Scenarios (each a golden file, ``golden/claude-code-<version>-compaction-<scenario>.jsonl``
and ``….traces.jsonl``; ``OTEL_PROGRESS_UPDATE_GOLDEN=1`` rewrites them):

- ``reread``: a healthy run that reads four things, compacts, re-reads the same four once
  (the same results: read before the boundary) and goes on with new work.
- ``loop``: the same ``cat`` six times, compacting after the third: the loop goes on
  across the boundary.
- ``spiral``: the same three reads again and again with a compaction after each round
  (nothing new between the compactions): a compaction death spiral. With three turns
  between compactions Claude Code's own breaker (``Autocompact is thrashing``, after three
  refills within three turns each) does not stop it.
- ``progress``: three compactions with a new file written and read between each.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from otel_progress import Config, Reason
from otel_progress.conventions import COMPACTION, classify, read_compaction
from otel_progress.conventions.record import SpanKind
from otel_progress.otlp.files import spans_from_request
from otel_progress.scan import scan_paths

from .cli_capture import (
    GOLDEN,
    UPDATE_ENV,
    brief,
    detect,
    golden_file,
    observations,
    read_records,
    same_detections,
    scan_detections,
    serving,
    write_jsonl,
)
from .scan_serve import scan_cli, serve_detections
from .test_claude_code_cli import VERSION, run_claude

#: The smallest auto-compact window Claude Code accepts (a smaller one reads as 100k).
WINDOW = "100000"
#: Input tokens the fake reports for a turn after which Claude Code compacts (past the
#: window less the summary's reserve).
FULL = 95_000
_LOW = 120

Turn = list[tuple[str, dict[str, Any]]]


def _bash(command: str, description: str) -> Turn:
    return [("Bash", {"command": command, "description": description})]


CAT = _bash("cat notes.txt", "Show the notes")
COUNT = _bash("wc -l notes.txt", "Count the lines")
LIST = _bash("ls", "List the files")
WRITE = _bash("printf 'step two\\n' > todo.txt", "Write the todo")
TODO = _bash("cat todo.txt", "Show the todo")


def _compact_after(script: list[Turn], turns: set[int]) -> list[int]:
    """The fake API's ``context``: full after the given turns (0-based), low otherwise."""
    return [FULL if i in turns else _LOW for i in range(len(script))]


def _scenarios() -> dict[str, tuple[list[Turn], list[int]]]:
    reread = [CAT, COUNT, WRITE, LIST, TODO, CAT, COUNT, LIST, TODO,
              _bash("printf 'step three\\n' >> todo.txt", "Add a step"), TODO]
    loop = [CAT] * 6
    spiral = [CAT, COUNT, LIST] * 4
    progress: list[Turn] = [CAT]
    for n, word in enumerate(("one", "two", "three")):
        progress += [_bash(f"printf '{word}\\n' > step{n}.txt", "Write a step"),
                     _bash(f"cat step{n}.txt", "Show the step"), CAT]
    progress.append(LIST)
    return {
        "reread": (reread, _compact_after(reread, {4})),
        "loop": (loop, _compact_after(loop, {2})),
        "spiral": (spiral, _compact_after(spiral, {2, 5, 8, 11})),
        "progress": (progress, _compact_after(progress, {3, 6, 9})),
    }


SCENARIOS = _scenarios()
#: scenario -> the compactions Claude Code performs
COMPACTIONS = {"reread": 1, "loop": 1, "spiral": 4, "progress": 3}


def golden(scenario: str, signal: str = "") -> Path:
    return GOLDEN / f"claude-code-{VERSION}-compaction-{scenario}{'.' + signal if signal else ''}.jsonl"


def capture(scenario: str, tmp_path: Path, exporter: dict[str, str] | None = None,
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """Run the real CLI through a compaction scenario (see :func:`run_claude`)."""
    script, context = SCENARIOS[scenario]
    return run_claude(script, True, tmp_path, exporter, context=context,
                      settings={"CLAUDE_CODE_AUTO_COMPACT_WINDOW": WINDOW})


def compactions(path: Path) -> list[Any]:
    """The compactions the Claude Code reader finds in a logs file."""
    return [o.compaction for o in observations(path) if o.kind == "compaction"]


def trace_marks(path: Path) -> list[str]:
    """The compaction marks the span conventions find in a traces file, in start order."""
    spans = [s for line in path.read_text().splitlines() if line.strip()
             for s in spans_from_request(json.loads(line)) if classify(s) is SpanKind.MODEL]
    spans.sort(key=lambda s: s.start_ns)
    return [m for m in map(read_compaction, spans) if m is not None]


def _check_capture(scenario: str, logs: Path, traces: Path) -> None:
    found = compactions(logs)
    assert len(found) == COMPACTIONS[scenario]
    for compaction in found:
        assert compaction.trigger == "auto" and compaction.source == "claude_code.compaction"
        assert compaction.tokens_before and compaction.tokens_after
        assert compaction.tokens_before > FULL > compaction.tokens_after
    summarisers = [r for r in read_records(logs) if r.event_name in ("api_request", "claude_code.api_request")
                   and r.attributes.get("query_source") == "compact"]
    assert len(summarisers) == len(found), "one summarising request per compaction"
    assert trace_marks(traces) == [COMPACTION] * len(found), "the summariser's llm_request span in the traces"


# -- the real CLI ---------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_real_cli_compacts(scenario: str, tmp_path: Path) -> None:
    logs, traces, api = capture(scenario, tmp_path)
    assert len(api.compactions) == COMPACTIONS[scenario], "the CLI asked for a summary"
    logs_path, traces_path = tmp_path / "logs.jsonl", tmp_path / "traces.jsonl"
    write_jsonl(logs_path, logs)
    write_jsonl(traces_path, traces)
    _check_capture(scenario, logs_path, traces_path)
    assert brief(logs_path) == EXPECTED_LOGS[scenario]
    assert _scan_traces(traces_path) == EXPECTED_TRACES[scenario]
    if os.environ.get(UPDATE_ENV) == "1":
        write_jsonl(golden(scenario), logs)
        write_jsonl(golden(scenario, "traces"), traces)


# -- the golden files (no CLI needed) --------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_golden_files_hold_the_compactions(scenario: str) -> None:
    logs = golden_file(golden(scenario).name)
    traces = golden_file(golden(scenario, "traces").name)
    _check_capture(scenario, logs, traces)


# -- detection: the readers and the engine, scan and serve ------------------------------------

#: scenario -> (reason, turn, evidence level) in the logs (``OTEL_LOG_TOOL_DETAILS=1``)
EXPECTED_LOGS: dict[str, list[tuple[str, int, str | None]]] = {
    "reread": [],
    "loop": [("frequency", 4, "arguments")],  # as loop-details, without the compaction
    "spiral": [("compaction_livelock", 9, "arguments")],  # at the third compaction
    "progress": [],
}
#: scenario -> (reason, turn) in the beta traces with tool content (full evidence)
EXPECTED_TRACES: dict[str, list[tuple[str, int]]] = {
    "reread": [],
    "loop": [("repeat_cycle", 3), ("repeat_cycle", 6)],  # as loop-details (a re-check, then the loop)
    "spiral": [("compaction_livelock", 9)],
    "progress": [],
}
#: the same traces with compactions ignored (``disabled_signals: [compaction]``): what the
#: boundary changes
WITHOUT_BOUNDARY: dict[str, list[tuple[str, int]]] = {
    "reread": [("barren", 9)],  # the four re-reads after the compaction
    "loop": [("repeat_cycle", 3), ("repeat_cycle", 6)],
    "spiral": [("repeat_cycle", 6), ("barren", 10)],  # caught, as a repeat of the re-reads
    # notes.txt re-read after each of the three compactions, between `printf … > stepN.txt`
    # writes: each a new command that succeeded silently (a change of the world), as the
    # logs' `command` already read; the traces' `bash_command` now too
    "progress": [],
}


def _scan_traces(path: Path, config: Config | None = None) -> list[tuple[str, int]]:
    result = scan_paths([str(path)], config, progress=False)
    assert not result.unreadable and sum(r.tool_calls for r in result.reports) > 0
    return [(d.reason.value, d.turn) for r in result.reports for d in r.detections]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_logs_give_the_expected_detections_through_the_engine_and_scan(scenario: str) -> None:
    path = golden_file(golden(scenario).name)
    assert brief(path) == EXPECTED_LOGS[scenario]
    assert same_detections(scan_detections(path), detect(path)), "otel-progress scan finds the same"
    status, found = scan_cli(path)
    assert [(d["reason"], d["turn"], d["figures"].get("evidence_level")) for d in found] == EXPECTED_LOGS[scenario]
    assert status == (1 if EXPECTED_LOGS[scenario] else 0)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_traces_give_the_expected_detections_and_what_the_boundary_changes(scenario: str) -> None:
    path = golden_file(golden(scenario, "traces").name)
    assert _scan_traces(path) == EXPECTED_TRACES[scenario]
    assert _scan_traces(path, Config(disabled_signals=frozenset({"compaction"}))) == WITHOUT_BOUNDARY[scenario]


def test_the_loop_across_the_compaction_is_caught_as_without_it() -> None:
    """The same six ``cat`` calls, with and without Claude Code compacting after the third
    (``loop-details`` is the capture without): the same detections, logs and traces."""
    assert brief(golden_file(golden("loop").name)) == brief(golden_file(f"claude-code-{VERSION}-loop-details.jsonl"))
    assert _scan_traces(golden_file(golden("loop", "traces").name)) == _scan_traces(
        golden_file(f"claude-code-{VERSION}-loop-details.traces.jsonl"))


def test_the_spiral_livelock_carries_its_figures() -> None:
    found = [d for d in detect(golden_file(golden("spiral").name)) if d.reason is Reason.COMPACTION_LIVELOCK]
    assert len(found) == 1
    attributes = found[0].event_attributes()
    assert found[0].event == "livelock" and attributes["progress.compactions"] == 3
    assert attributes["progress.steps"] == 6 and attributes["progress.compaction_trigger"] == "auto"
    assert attributes["progress.tokens_before"] > FULL > attributes["progress.tokens_after"]
    # the summarisers' own requests are burned tokens too: 6 agent turns and 2 summaries
    assert attributes["progress.tokens_burned"] >= 2 * FULL
    assert attributes["progress.evidence_level"] == "arguments"


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_serve_logs_service(scenario: str) -> None:
    events, marked = serve_detections(golden_file(golden(scenario).name))
    assert [(e["progress.reason"]["stringValue"], int(e["progress.turn"]["intValue"]),
             e.get("progress.evidence_level", {}).get("stringValue")) for e in events] == EXPECTED_LOGS[scenario]
    assert len(marked) == len(EXPECTED_LOGS[scenario])
    for record, event in zip(marked, events, strict=True):
        # a livelock goes on the compaction record that completed it, a loop on its tool_result
        expected = "compaction" if event["progress.reason"]["stringValue"] == "compaction_livelock" else "tool_result"
        assert record["event.name"] == {"stringValue": expected}
        assert record["progress.detected"] == {"boolValue": True}


def test_the_real_spiral_through_serve(tmp_path: Path) -> None:
    """The real CLI's logs and beta traces over OTLP/gRPC straight to ``otel-progress serve``:
    the livelock arrives as a ``progress.livelock`` record on the third
    ``claude_code.compaction`` record, and once only (issue 17: one loop, one report): the
    summariser's ``claude_code.llm_request`` spans, which show the same livelock, are
    forwarded without a second ``livelock`` event."""
    with serving() as (sink, service):
        grpc = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{service.port}"}
        capture("spiral", tmp_path, grpc)
        records = sink.wait(lambda r: any(name == "progress.livelock" for name, _ in r), timeout=20, settle=0.5)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "claude_code.llm_request" not in sink.span_names():
            time.sleep(0.2)
        time.sleep(0.5)  # (the trace batch that completes the spiral, if any, after its first spans)
        names, spans = sink.span_names(), sink.span_events()
    logged = [a for name, a in records if name == "progress.livelock"]
    assert [(a["progress.reason"], a["progress.turn"], a["progress.compactions"]) for a in logged] == [
        ("compaction_livelock", 9, 3)]
    marked = [a for name, a in records
              if name in ("compaction", "claude_code.compaction") and a.get("progress.detected")]
    assert len(marked) == 1 and marked[0]["progress.reason"] == "compaction_livelock"
    assert "claude_code.llm_request" in names, names
    assert [(span, a) for span, event, a in spans if event in ("livelock", "no_progress")] == []
