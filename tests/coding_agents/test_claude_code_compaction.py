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
from pathlib import Path
from typing import Any

import pytest

from otel_progress.conventions import COMPACTION, classify, read_compaction
from otel_progress.conventions.record import SpanKind
from otel_progress.otlp_json import spans_from_request

from .cli_capture import GOLDEN, UPDATE_ENV, golden_file, observations, read_records, write_jsonl
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
    if os.environ.get(UPDATE_ENV) == "1":
        write_jsonl(golden(scenario), logs)
        write_jsonl(golden(scenario, "traces"), traces)


# -- the golden files (no CLI needed) --------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_golden_files_hold_the_compactions(scenario: str) -> None:
    logs = golden_file(golden(scenario).name)
    traces = golden_file(golden(scenario, "traces").name)
    _check_capture(scenario, logs, traces)
