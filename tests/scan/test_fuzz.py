"""Malformed OTLP/JSON never crashes ``scan``: structure-aware fuzzing.

Hypothesis builds trace exports shaped like the real thing (resourceSpans > scopeSpans >
spans with GenAI attributes) and puts odd JSON types at every level: a map where a
string is expected, ``{"arrayValue": 5}``, numbers such as 1.7e308 or 1e999, lists of
the wrong things, missing and bogus ids. Every document must give exit status 0, 1 or 2
and no traceback; most run in-process through ``cli.main`` (fast), a few through the
console script in a subprocess.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_progress.cli import main

ROOT = Path(__file__).resolve().parents[2]

ODD: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([1.7e308, -1.7e308, 1e-320, 0.5, "1e999", "NaN", "Infinity", "-1", "abc", "", "0" * 5000]),
    st.text(max_size=8), st.just([]), st.just({}), st.just({"arrayValue": 5}), st.just({"kvlistValue": "x"}),
    st.just({"kvlistValue": {"values": [{"key": 1, "value": {"intValue": {}}}]}}),
    st.just({"stringValue": {"kvlistValue": {"values": []}}}), st.just({"bytesValue": 7}),
    st.just({"doubleValue": "x"}), st.just([{"stringValue": "a"}]),
)

KEYS = st.sampled_from([
    "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
    "gen_ai.agent.name", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "openinference.span.kind",
    "tool.name", "input.value", "output.value", "traceloop.span.kind", "traceloop.entity.output",
    "mcp.method.name", "error.type", "progress.state", "progress.evidence", "progress.goal.distance",
    "progress.measure", "progress.plan.node", "llm.token_count.prompt", "gen_ai.conversation.id",
])

GOOD_VALUE = st.one_of(
    st.sampled_from(["execute_tool", "invoke_agent", "chat", "TOOL", "AGENT", "LLM", "tool", "agent",
                     "tools/call", "search", '{"q": 1}', '"0 results"', "a,b"]).map(lambda s: {"stringValue": s}),
    st.integers(-5, 10**6).map(lambda i: {"intValue": str(i)}),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: {"doubleValue": f}),
)


def _value() -> st.SearchStrategy[Any]:
    return st.one_of(GOOD_VALUE, ODD, st.lists(GOOD_VALUE | ODD, max_size=3).map(
        lambda v: {"arrayValue": {"values": v}}))


ATTRIBUTE = st.one_of(st.fixed_dictionaries({"key": KEYS, "value": _value()}), ODD)
IDS = st.one_of(st.sampled_from(["0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", "00f067aa0ba902b7",
                                 "00000000000000000000000000000000", "zz", "AAECAwQFBgc=", ""]), ODD)
SPAN = st.one_of(
    st.fixed_dictionaries(
        {"traceId": IDS, "spanId": IDS},
        optional={"parentSpanId": IDS, "name": st.one_of(st.text(max_size=12), ODD),
                  "startTimeUnixNano": st.one_of(st.integers(0, 2**64).map(str), ODD),
                  "endTimeUnixNano": st.one_of(st.integers(0, 2**64).map(str), ODD),
                  "attributes": st.one_of(st.lists(ATTRIBUTE, max_size=6), ODD),
                  "status": st.one_of(st.fixed_dictionaries({}, optional={"code": ODD | st.just(2),
                                                                         "message": ODD}), ODD),
                  "events": st.one_of(st.lists(st.one_of(st.fixed_dictionaries(
                      {"name": st.one_of(st.just("exception"), ODD)},
                      optional={"attributes": st.one_of(st.lists(ATTRIBUTE, max_size=3), ODD)}), ODD),
                      max_size=2), ODD)}),
    ODD,
)
SCOPE = st.one_of(st.fixed_dictionaries({}, optional={"spans": st.one_of(st.lists(SPAN, max_size=6), ODD),
                                                      "scope": ODD}), ODD)
RESOURCE = st.one_of(st.fixed_dictionaries({}, optional={"scopeSpans": st.one_of(st.lists(SCOPE, max_size=2), ODD),
                                                         "resource": ODD}), ODD)
DOCUMENT = st.one_of(st.fixed_dictionaries({"resourceSpans": st.one_of(st.lists(RESOURCE, max_size=2), ODD)}),
                     ODD)


def _scan(path: Path, *extra: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["scan", "--no-progress", *extra, str(path)])
    return status, err.getvalue()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(docs=st.lists(DOCUMENT, min_size=1, max_size=3))
def test_odd_documents_never_crash(tmp_path: Path, docs: list[Any]) -> None:
    path = tmp_path / "fuzz.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    status, err = _scan(path, "--format", "table")
    assert status in (0, 1, 2, 4), err
    assert "Traceback" not in err and "internal error" not in err, err


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(doc=DOCUMENT)
def test_odd_documents_through_the_console_script(tmp_path: Path, doc: Any) -> None:
    path = tmp_path / "fuzz.json"
    path.write_text(json.dumps(doc, indent=1))  # pretty-printed: the single-document path
    proc = subprocess.run([sys.executable, "-m", "otel_progress.cli", "scan", "--format", "table", str(path)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode in (0, 1, 2, 4), proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_real_trace_with_odd_values_still_finds_its_loop(tmp_path: Path) -> None:
    """Odd values in one span are that span's problem: the rest of the run is analysed."""
    example = (ROOT / "examples" / "traces" / "agents.jsonl").read_text().splitlines()[0]
    doc = json.loads(example)
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    chat = next(s for s in spans if s["name"].startswith("chat"))
    chat["attributes"] = [{"key": "gen_ai.usage.input_tokens", "value": {"doubleValue": 1.7e308}},
                          {"key": "gen_ai.usage.output_tokens", "value": {"doubleValue": 1.7e308}},
                          {"key": "gen_ai.operation.name", "value": {"kvlistValue": {"values": []}}}]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    clean = tmp_path / "clean.json"
    clean.write_text(example)
    status, err = _scan(path)
    assert status == 1 and "Traceback" not in err
    assert _scan(clean)[0] == 1


def test_an_internal_error_is_one_line_and_status_three(monkeypatch, capsys) -> None:
    import otel_progress.scan

    def broken(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(otel_progress.scan, "run_scan", broken)
    monkeypatch.delenv("OTEL_PROGRESS_TRACEBACK", raising=False)
    assert main(["scan", "x.jsonl"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: RuntimeError: boom" in err and "Traceback" not in err


def test_output_to_a_full_disk_is_one_line_and_status_two() -> None:
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full (Linux)")
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "otel_progress.cli", "scan",
                               str(ROOT / "examples" / "traces" / "agents.jsonl")],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "No space left on device" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def _deep_kvlist(levels: int) -> bytes:
    inner = '{"stringValue":"x"}'
    for _ in range(levels):
        inner = '{"kvlistValue":{"values":[{"key":"k","value":' + inner + "}]}}"
    return ('{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0af7651916cd43dd8448eb211c80319c",'
            '"spanId":"b7ad6b7169203331","attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":'
            '"execute_tool"}},{"key":"gen_ai.tool.call.result","value":' + inner + "}]}]}]}]}\n").encode()



@pytest.mark.parametrize("content", [
    b"\xff\xfe\x00garbage\n", b"[" * 200_000 + b"\n", b"{\n", b"\x00\x00\x00\n",
    b"\xef\xbb\xbf{\"resourceSpans\":[]}\n",
    _deep_kvlist(180), _deep_kvlist(400), b'{"resourceSpans": 5}\n', b'{"resourceSpans": [[[]]]}\n',
], ids=["utf16", "deep-array", "lone-brace", "nul", "bom", "deep-kvlist", "deeper-kvlist", "int", "nested-lists"])
def test_odd_bytes_never_crash(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "odd.bin"
    path.write_bytes(content)
    status, err = _scan(path)
    assert status in (0, 2), err
    assert "Traceback" not in err and "internal error" not in err, err
