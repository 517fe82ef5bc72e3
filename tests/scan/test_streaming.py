"""``scan`` streams its input: traces analysed as they complete, every buffer bounded, every
input problem reported (with FILE:LINE, capped, counted), and output paths checked before
the work."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from otel_progress import Config, ProgressEngine
from otel_progress.cli import main
from otel_progress.otlp.files import iter_documents, open_input, spans_from_request
from otel_progress.scan import MAX_PROBLEMS_SHOWN, scan_paths
from otel_progress.scan.analyse import analyse_trace
from tests.otlp_builder import TraceBuilder, example_traces, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "traces" / "agents.jsonl"
S = 1_000_000_000


def _export(spans: list[dict[str, Any]]) -> str:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + "\n"


def _interleaved(n_traces: int, per_line: int = 4) -> str:
    """Many short runs, a third of them looping, their spans spread over lines of
    ``per_line`` spans in end order with three runs in flight (as a Collector writes)."""
    queue: list[list[dict[str, Any]]] = []
    for n in range(n_traces):
        t = TraceBuilder(f"run{n}", f"agent-{n % 5}")
        t.t += n * 60 * S  # runs one minute apart
        for i in range(5):
            t.chat(300)
            t.tool("search_docs", {"q": "same" if n % 3 == 0 else f"q{n}-{i}"},
                   "0 results" if n % 3 == 0 else f"hit {n}-{i}")
        spans = t.request()["resourceSpans"][0]["scopeSpans"][0]["spans"]
        queue.append(sorted(spans, key=lambda s: int(s["endTimeUnixNano"])))
    lines, in_flight = [], []
    while queue or in_flight:
        while len(in_flight) < 3 and queue:
            in_flight.append(queue.pop(0))
        batch = []
        for run in list(in_flight):
            batch.append(run.pop(0))
            if not run:
                in_flight.remove(run)
            if len(batch) == per_line:
                break
        lines.append(_export(batch))
    return "".join(lines)


def _reference(path: Path) -> list[dict[str, Any]]:
    """The in-process analysis of the whole input at once: every trace's spans, traces in
    order of their first span's start (then of their id)."""
    traces: dict[str, list[Any]] = {}
    stream, _ = open_input(str(path))
    with stream:
        for item in iter_documents(stream, str(path)):
            assert isinstance(item, tuple)
            for span in spans_from_request(item[1]):
                traces.setdefault(span.trace_id, []).append(span)
    engine = ProgressEngine(Config())
    out = []
    for spans in sorted(traces.values(), key=lambda s: (min(x.start_ns for x in s), s[0].trace_id)):
        out += [d.to_dict() for d in analyse_trace(spans, engine).detections]
    return out


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["scan", "--no-progress", *args])
    return status, out.getvalue(), err.getvalue()


def test_streamed_results_equal_the_whole_input_analysis(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    path.write_text(_interleaved(150))
    result = scan_paths([str(path)])
    assert [d.to_dict() for d in result.detections] == _reference(path)
    assert len(result.detections) >= 40  # the looping third is found
    assert not result.problems, result.problems
    # traces were analysed while the input was read: far fewer spans held than read
    assert result.spans == 150 * 11 and result.held_peak < result.spans / 3, result.held_peak


def test_a_span_after_its_trace_was_analysed_is_merged(tmp_path: Path) -> None:
    """A span of a trace already analysed: the trace is read again and analysed whole, and
    each of its detections is reported once."""
    text = _interleaved(100)
    late = json.loads(text.splitlines()[0])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    path = tmp_path / "late.jsonl"
    path.write_text(text + _export([{**late, "spanId": "00000000000000ff", "name": "late one"}]))
    status, out, err = _run(str(path))
    assert "1 trace(s) had spans arriving after the trace was analysed" in err
    assert status == 1
    lines = text.splitlines()
    first = json.loads(lines[0])
    first["resourceSpans"][0]["scopeSpans"][0]["spans"].append({**late, "spanId": "00000000000000ff",
                                                                 "name": "late one"})
    in_order = tmp_path / "in_order.jsonl"
    in_order.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    assert out == _run(str(in_order))[1]


def test_a_trace_whose_second_half_arrives_much_later_keeps_its_detection(tmp_path: Path) -> None:
    """Half of a looping trace's spans, then 500 other runs, then the other half (a file
    merged from two exporters): the loop is found, as in the file with the trace whole."""
    t = TraceBuilder("split", "splitter")
    for _ in range(6):
        t.chat(300)
        t.tool("search_docs", {"q": "same"}, "0 results")
    spans = t.request()["resourceSpans"][0]["scopeSpans"][0]["spans"]
    root = next(s for s in spans if not s.get("parentSpanId"))
    rest = [s for s in spans if s is not root]
    first, second = [root, *rest[: len(rest) // 2]], rest[len(rest) // 2:]
    whole = tmp_path / "whole.jsonl"
    whole.write_text(_export(spans))
    expected = [(d.reason, d.turn, d.span_id) for d in scan_paths([str(whole)]).detections]
    assert expected
    split = tmp_path / "split.jsonl"
    split.write_text(_export(first) + _interleaved(500) + _export(second))
    found = [(d.reason, d.turn, d.span_id) for d in scan_paths([str(split)]).detections
             if d.trace_id == root["traceId"]]
    assert found == expected
    from_stdin = subprocess.run([sys.executable, "-m", "otel_progress.cli", "scan", "-"], input=split.read_text(),
                                capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert sum(json.loads(line)["trace_id"] == root["traceId"] for line in from_stdin.stdout.splitlines()) \
        == len(expected), from_stdin.stderr


def test_held_spans_are_bounded_even_without_roots(tmp_path: Path) -> None:
    lines = []
    for n in range(30):  # traces whose root span is never exported
        t = TraceBuilder(f"orphan{n}", None)
        for i in range(4):
            t.tool("read", {"i": i}, f"r{i}")
        lines.append(_export([{**s, "parentSpanId": "00000000000000aa"} for s in t.spans]))
    path = tmp_path / "orphans.jsonl"
    path.write_text("".join(lines))
    result = scan_paths([str(path)], max_held_spans=10)
    assert result.held_peak <= 10 + 4
    assert any("analysed before their root span was read" in str(p) for p in result.problems)
    assert len(result.reports) == 30


def test_garbage_lines_are_capped_with_a_count(tmp_path: Path) -> None:
    path = tmp_path / "garbage.jsonl"
    path.write_text(EXAMPLE.read_text() + "".join(f"garbage {i} {{\n" for i in range(500)))
    status, out, err = _run(str(path))
    assert status == 1 and out
    lines = err.splitlines()
    assert sum("not valid JSON" in line for line in lines) == MAX_PROBLEMS_SHOWN
    assert f"{path}: {500 - MAX_PROBLEMS_SHOWN:,} more lines that could not be read not shown (500 in all)" in err
    assert len(lines) == MAX_PROBLEMS_SHOWN + 1


def test_corrupt_first_line_then_line_delimited(tmp_path: Path) -> None:
    path = tmp_path / "first.jsonl"
    path.write_text('{"resourceSpans": [ broken\n' + EXAMPLE.read_text())
    status, out, err = _run(str(path))
    assert status == 1 and f"{path}:1: not valid JSON" in err
    assert out == _run(str(EXAMPLE))[1]


def test_multi_line_document_and_line_length_are_bounded(tmp_path: Path) -> None:
    first = json.loads(EXAMPLE.read_text().splitlines()[0])
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(first, indent=2))
    assert scan_paths([str(pretty)]).detections  # within the limit: read as one document
    result = scan_paths([str(pretty)], max_document_bytes=2000)
    assert result.unreadable and "not one JSON document within the" in str(result.problems[0])
    long_line = tmp_path / "long.jsonl"
    long_line.write_text(EXAMPLE.read_text().splitlines()[0] + "\n" + EXAMPLE.read_text())
    result = scan_paths([str(long_line)], max_document_bytes=len(EXAMPLE.read_text().splitlines()[0]) - 1)
    assert any(str(p).startswith(f"{long_line}:1: line of ") and "longer than" in str(p) for p in result.problems)


def test_malformed_and_reused_ids_are_reported(tmp_path: Path) -> None:
    docs = TraceBuilder("docs", "docs-agent")
    for i in range(4):
        docs.chat(400)
        docs.tool("search_docs", {"q": f"q{i}"}, "0 results")
    buf = io.StringIO()
    write_jsonl([docs], buf)
    clean = tmp_path / "clean.jsonl"
    clean.write_text(buf.getvalue())
    expected = [(d.reason, d.turn) for d in scan_paths([str(clean)]).detections]
    assert expected

    doc = json.loads(buf.getvalue())
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    for span in spans:  # every tool span shares one id: still four different calls
        if span["name"].startswith("execute_tool"):
            span["spanId"] = "00000000000000bb"
    reused = tmp_path / "reused.jsonl"
    reused.write_text(json.dumps(doc) + "\n")
    result = scan_paths([str(reused)])
    assert [(d.reason, d.turn) for d in result.detections] == expected
    assert sum("span id 00000000000000bb is used by more than one span" in str(p) for p in result.problems) == 3

    for span in spans:
        span["traceId"] = "not-a-trace-id"
    bogus = tmp_path / "bogus.jsonl"
    bogus.write_text("\n" + json.dumps(doc) + "\n")
    status, _, err = _run(str(bogus))
    assert f'{bogus}:2: malformed traceId "not-a-trace-id"' in err
    assert status == 1  # reported, and the spans that share the id are still one trace

    twice = tmp_path / "twice.jsonl"  # the same export sent twice
    twice.write_text(clean.read_text() * 2)
    result = scan_paths([str(twice)])
    assert [(d.reason, d.turn) for d in result.detections] == expected
    assert any(f"{len(spans)} duplicate span(s)" in str(p) for p in result.problems)


def test_unwritable_html_fails_before_the_scan(tmp_path: Path) -> None:
    status, out, err = _run("--html", str(tmp_path / "missing" / "r.html"), str(EXAMPLE))
    assert status == 2 and out == ""
    assert "cannot write the HTML report" in err and "does not exist" in err
    status, out, err = _run("--html", str(tmp_path), str(EXAMPLE))
    assert status == 2 and out == "" and "is a directory" in err


def test_html_from_stdin_has_timelines(tmp_path: Path) -> None:
    report = tmp_path / "r.html"
    proc = subprocess.run([sys.executable, "-m", "otel_progress.cli", "scan", "--html", str(report), "-"],
                          input=EXAMPLE.read_text(), capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr
    text = report.read_text()
    data = json.loads(text.split('<script id="report-data" type="application/json">')[1].split("</script>")[0])
    assert all(r["tl"] and r["tl"]["marks"] for r in data["runs"] if r["turns"])


def test_demo_to_an_unwritable_path_fails_cleanly(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "otel_progress.cli", "demo", "-o", str(tmp_path / "no" / "d.jsonl")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "otel-progress demo: cannot write" in proc.stderr and proc.stdout == ""


def test_example_traces_unchanged_by_streaming(tmp_path: Path) -> None:
    buf = io.StringIO()
    write_jsonl(example_traces(), buf)
    path = tmp_path / "ex.jsonl"
    path.write_text(buf.getvalue())
    assert [d.to_dict() for d in scan_paths([str(path)]).detections] == _reference(path)


def test_grouped_runs_are_held_whole_whatever_max_runs(tmp_path: Path) -> None:
    """Six conversations of root tool calls, interleaved (each call a trace of its own): each
    conversation is one run, replayed whole at the end of the input, so none is cut short
    by ``max_runs``."""
    lines = []
    for i in range(3):
        for n in range(6):
            t = TraceBuilder(f"session{n}-call{i}", None)
            t.t += i * S
            t.tool("search", {"q": "same"}, "0 results")
            span = t.spans[0]
            span["parentSpanId"] = ""
            span["attributes"].append({"key": "gen_ai.conversation.id", "value": {"stringValue": f"s{n}"}})
            lines.append(_export([span]))
    path = tmp_path / "sessions.jsonl"
    path.write_text("".join(lines))
    for config in (Config(), Config(max_runs=2)):
        result = scan_paths([str(path)], config)
        assert not any("dropped unfinished" in str(p) for p in result.problems), result.problems
        groups = {r.trace_id: r for r in result.reports if r.trace_id.startswith("group:")}
        assert sorted(groups) == [f"group:gen_ai.conversation.id=s{n}" for n in range(6)]
        assert all(r.runs[0].turns == 3 and r.detections for r in groups.values())


def test_pretty_printed_documents_back_to_back(tmp_path: Path) -> None:
    """``jq . traces.jsonl`` output: several multi-line documents one after another."""
    pretty = "".join(json.dumps(json.loads(line), indent=2) + "\n" for line in EXAMPLE.read_text().splitlines())
    path = tmp_path / "jq.json"
    path.write_text(pretty)
    status, out, err = _run(str(path))
    assert (status, out, err) == (1, _run(str(EXAMPLE))[1], "")
    path.write_text(pretty + "{ truncated\n")
    status, out2, err = _run(str(path))
    last = len(pretty.splitlines()) + 1
    assert status == 1 and out2 == out
    assert f"{path}:{last}: not valid JSON from here on (after 5 multi-line document(s))" in err


def test_input_with_no_usable_span_is_an_error(tmp_path: Path) -> None:
    doc = json.loads(EXAMPLE.read_text().splitlines()[0])
    for span in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        span.pop("spanId")
    path = tmp_path / "noids.json"
    path.write_text(json.dumps(doc))
    status, _, err = _run(str(path))
    assert status == 2 and "span without traceId/spanId skipped" in err
    assert "none of the 9 span(s) read could be analysed" in err


def test_spans_no_convention_reads_are_read_lean_with_the_same_analysis() -> None:
    """``spans_from_request(lean=True)`` leaves out the attributes and events of spans
    without a marker key or name prefix; the analysis of every example, corpus-like and
    golden trace is the same."""
    from tests.logs.conftest import GOLDEN

    paths = [EXAMPLE, *sorted(GOLDEN.glob("*.traces.jsonl"))]
    lean_spans = 0
    for path in paths:
        stream, _ = open_input(str(path))
        with stream:
            docs = [item[1] for item in iter_documents(stream, str(path)) if not hasattr(item, "message")]
        for doc in docs:
            full = list(spans_from_request(doc))
            lean = list(spans_from_request(doc, lean=True))
            def heads(spans: list[Any]) -> list[tuple[Any, ...]]:
                return [(s.trace_id, s.span_id, s.parent_id, s.name, s.start_ns, s.end_ns) for s in spans]

            assert heads(full) == heads(lean)
            lean_spans += sum(1 for f, g in zip(full, lean, strict=True) if f != g)
            by_trace: dict[str, tuple[list[Any], list[Any]]] = {}
            for f, g in zip(full, lean, strict=True):
                pair = by_trace.setdefault(f.trace_id, ([], []))
                pair[0].append(f)
                pair[1].append(g)
            for f_spans, g_spans in by_trace.values():
                a = analyse_trace(f_spans, ProgressEngine(Config()))
                b = analyse_trace(g_spans, ProgressEngine(Config()))
                assert (a.detections, a.runs, a.tool_calls, a.skipped) == (b.detections, b.runs, b.tool_calls,
                                                                           b.skipped)
    assert lean_spans > 0
