"""The corpus as OTLP/JSON in three span conventions: the span readers see the same calls,
tokens and errors in each, and otel-progress reaches the same verdicts through
``otel-progress scan`` and through the in-process processor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.quality.corpus import load_corpus
from bench.quality.otlp import CONVENTIONS, build_trace, write_traces
from bench.quality.ours import ProcessorDetector, ScanDetector, processor_available
from otel_progress import NOT_CAPTURED
from otel_progress.conventions.spans import Lineage, SpanKind, read_tokens, read_tool_call
from otel_progress.otlp.files import spans_from_request

RUNS = load_corpus()

# Known differences, reported to the engine's owner (see bench/quality/RESULTS.md):
# - OpenLLMetry's @tool decorator JSON-encodes a text result ("0 results" -> "\"0 results\""),
#   which the reader keeps as a quoted string, so the empty result is not seen as empty.
# - scan evaluates a sub-agent's run signature before the planner's pending call is flushed,
#   one lap later than the processor.
# (convention or path, run id) pairs known to detect at a different turn; empty now that
# OpenLLMetry's JSON-encoded outputs are decoded and scan replays spans in the
# processor's order. A new difference fails the test, and so does a stale entry.
TURN_DIFFERENCES: set[tuple[str, str]] = set()


def _records(run, convention):
    doc = build_trace(run, convention).document
    return list(spans_from_request(doc))


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_readers_see_the_corpus_calls(convention: str) -> None:
    for run in RUNS:
        records = _records(run, convention)
        lineage = Lineage()
        kinds = {r.span_id: lineage.add_record(r) for r in records}
        tools = sorted((r for r in records if kinds[r.span_id] is SpanKind.TOOL), key=lambda r: r.start_ns)
        calls = [c for _, c in run.calls()]
        assert [read_tool_call(r).name for r in tools] == [c.name for c in calls], run.id
        for record, call in zip(tools, calls, strict=True):
            read = read_tool_call(record)
            assert read.error == (call.error is not None), run.id
            if call.error is not None:
                assert read.error_message == call.error.message
            if not run.capture:
                assert read.arguments is NOT_CAPTURED and read.result is NOT_CAPTURED
            else:
                assert read.arguments is not NOT_CAPTURED
        model_tokens = sum(read_tokens(r) for r in records if kinds[r.span_id] is SpanKind.MODEL)
        expected = sum(s.tokens for s in run.steps) + (run.steps[-1].input_tokens // 10
                                                       + run.steps[-1].tokens if run.conclusion else 0)
        assert model_tokens == expected, run.id
        agents = [r for r in records if kinds[r.span_id] is SpanKind.AGENT]
        assert len(agents) == len(run.invocations()), run.id


def test_parallel_calls_overlap_under_one_parent() -> None:
    run = next(r for r in RUNS if r.id == "h-gsd-pi-1067-sixteen-reads")
    records = [r for r in _records(run, "genai") if r.name == "execute_tool read_file"]
    assert len(records) == 16
    assert len({r.parent_id for r in records}) == 1
    assert max(r.start_ns for r in records) < min(r.end_ns for r in records)


def test_traces_are_otlp_json_files(tmp_path: Path) -> None:
    traces = write_traces(RUNS[:3], "genai", tmp_path)
    for run_id, trace in traces.items():
        doc = json.loads((tmp_path / f"{run_id}.json").read_text())
        spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
        assert all(len(s["traceId"]) == 32 and len(s["spanId"]) == 16 for s in spans)
        assert all(int(s["endTimeUnixNano"]) >= int(s["startTimeUnixNano"]) for s in spans)
        assert {s["traceId"] for s in spans} == {trace.trace_id}
    assert build_trace(RUNS[0], "genai").document == build_trace(RUNS[0], "genai").document


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, int | None]]:
    root = tmp_path_factory.mktemp("conventions")
    out: dict[str, dict[str, int | None]] = {}
    for convention in CONVENTIONS:
        alarms = ScanDetector(convention, root).evaluate(RUNS)
        out[convention] = {k: (a.turn if a else None) for k, a in alarms.items()}
    if processor_available():
        alarms = ProcessorDetector("genai").evaluate(RUNS)
        out["processor"] = {k: (a.turn if a else None) for k, a in alarms.items()}
    return out


@pytest.mark.parametrize("convention", [*CONVENTIONS[1:], "processor"])
def test_same_verdicts_in_every_convention_and_path(verdicts, convention: str) -> None:
    if convention not in verdicts:
        pytest.skip("otel_progress.ProgressSpanProcessor is not available")
    reference, other = verdicts["genai"], verdicts[convention]
    assert {k for k, v in reference.items() if v} == {k for k, v in other.items() if v}


@pytest.mark.parametrize("convention", [*CONVENTIONS[1:], "processor"])
def test_same_detection_turns_in_every_convention_and_path(verdicts, convention: str) -> None:
    if convention not in verdicts:
        pytest.skip("otel_progress.ProgressSpanProcessor is not available")
    reference, other = verdicts["genai"], verdicts[convention]
    differing = {k for k in reference if reference[k] != other[k]}
    known = {run for conv, run in TURN_DIFFERENCES if conv == convention}
    assert differing <= known, f"new differences: {sorted(differing - known)}"
    if known - differing:
        pytest.fail(f"fixed, remove from TURN_DIFFERENCES: {sorted(known - differing)}")


def test_scoreboard_command_writes_table_and_chart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.quality.__main__ import main

    only = ["s-seed002-two-call-cycle", "s-seed000-docs-rephrased", "h-seed000-deploy-poll",
            "h-seed002-retry-after-timeout"]
    assert main(["--out", str(tmp_path), "--only", *only, "--html", str(tmp_path / "r.html")]) == 0
    printed = capsys.readouterr().out
    assert "| **otel-progress** (scan, OTel GenAI) | 2/2 (100%) | 0/2 (0%) |" in printed
    results = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert "| Strict same-call-twice |" in results and "s-seed000-docs-rephrased" in results
    svg = (tmp_path / "scoreboard.svg").read_text(encoding="utf-8")
    assert svg.startswith("<svg") and "otel-progress (scan, OTel GenAI)" in svg
    assert "<svg class" not in (tmp_path / "r.html").read_text(encoding="utf-8")[:200]
    assert (tmp_path / "r.html").stat().st_size > 5000
