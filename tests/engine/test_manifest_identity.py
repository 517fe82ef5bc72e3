"""The manifest's declared request identity (issue 29, item 5): ``identity`` (only these
argument paths tell two requests apart) and ``ignore`` (cosmetic paths that never do)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from otel_progress import ManifestError, parse_manifest
from tests.engine.helpers import as_json, brief, call, manifest_config, run

IGNORE_LABEL = [{"name": "search", "ignore": ["display_name", "options.reason"]}]
READ_LINES = [{"name": "read_lines", "identity": ["path", "line"]}]


def _searches(n: int, same_query: bool = True) -> list[dict]:
    # The model labels each call afresh ("Searching (3)") and states a new reason: by
    # default every request is new, although the search is the same one.
    return [call("search", as_json({"query": "flight to Lima" if same_query else f"flight {i}",
                                    "display_name": f"Searching ({i})",
                                    "options": {"limit": 5, "reason": f"attempt {i} to find it"}}),
                 "3 results: LA2471, LA2473, AV2551" if same_query else f"1 result: LA24{i}")
            for i in range(n)]


def test_cosmetic_arguments_hide_the_repeat_by_default() -> None:
    # only the answers that bring nothing new give it away, later, as barren steps
    assert brief(run(_searches(6))) == [(5, "barren", 1)]


def test_ignored_arguments_make_the_repeat_visible() -> None:
    detections = brief(run(_searches(6), manifest_config(IGNORE_LABEL)))
    assert detections[0] == (2, "repeat_cycle", 1), "the same search, told apart only by its label"


def test_ignored_arguments_keep_different_requests_apart() -> None:
    assert run(_searches(6, same_query=False), manifest_config(IGNORE_LABEL)) == []


def _reads(lines: list[int]) -> list[dict]:
    return [call("read_lines", as_json({"path": "src/app.py", "line": line, "why": f"check {i}"}),
                 f"{line}: return compute(x)") for i, line in enumerate(lines)]


def test_identity_paths_alone_tell_requests_apart() -> None:
    assert brief(run(_reads([40] * 6))) == [(5, "barren", 1)]  # (each request states another reason)
    assert brief(run(_reads([40] * 6), manifest_config(READ_LINES)))[0] == (2, "repeat_cycle", 1)
    assert run(_reads([10, 20, 30, 40, 50, 60]), manifest_config(READ_LINES)) == []


def test_request_identity_of_nested_and_absent_paths() -> None:
    spec = parse_manifest([{"name": "t", "identity": ["a.b", "c", "missing.x"], "ignore": ["a.b.d"]}])["t"]
    args = {"a": {"b": {"d": 1, "e": 2}, "z": 3}, "c": [1], "y": 0}
    assert spec.request_identity(args) == {"a": {"b": {"e": 2}}, "c": [1]}
    assert args == {"a": {"b": {"d": 1, "e": 2}, "z": 3}, "c": [1], "y": 0}  # (not changed)
    assert spec.request_identity("plain text") == "plain text"
    assert spec.kind == "call"


@pytest.mark.parametrize("entry, message", [
    ({"name": "t"}, "must declare 'identity' or 'ignore'"),
    ({"name": "t", "identity": "path"}, "'identity' must be a list of argument paths"),
    ({"name": "t", "ignore": ["a..b"]}, "'ignore' must be a list of argument paths"),
    ({"name": "t", "identity": [""]}, "'identity' must be a list of argument paths"),
    ({"name": "t", "kind": "read", "identity": ["p"]}, "'kind' must be one of wait, write, call"),
])
def test_bad_identity_entries_say_what_is_wrong(entry: dict, message: str) -> None:
    with pytest.raises(ManifestError, match=message.replace("(", r"\(")):
        parse_manifest([entry])


def test_a_wait_tool_may_declare_its_identity_too() -> None:
    spec = parse_manifest([{"name": "status", "kind": "wait", "terminal_values": ["done"],
                            "ignore": ["note"]}])["status"]
    assert (spec.kind, spec.ignore) == ("wait", ("note",))


def _write_searches(path: Path) -> None:
    """One agent's run, six labelled searches for the same flight, through the real SDK
    and the package's OTLP/JSON file exporter (the Collector file exporter's format)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from otel_progress.demo import ScriptedAgent
    from otel_progress.otlp.exporter import OtlpJsonFileExporter

    exporter = OtlpJsonFileExporter(path)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = ScriptedAgent(provider.get_tracer("test"))
    with agent.agent("travel"):
        for spec in _searches(6):
            agent.chat(100, 20)
            agent.tool(spec["name"], json.loads(spec["arguments"]), spec["result"])
    provider.shutdown()


def test_scan_reads_the_declared_identity_from_its_config(tmp_path: Path) -> None:
    """``otel-progress scan --config`` with a manifest that ignores the label: the loop is
    found; without it, not."""
    traces = tmp_path / "run.jsonl"
    _write_searches(traces)
    config = tmp_path / "progress.json"
    config.write_text(json.dumps({"manifest": IGNORE_LABEL}))

    def scan(*extra: str) -> list[dict]:
        done = subprocess.run([sys.executable, "-m", "otel_progress.cli", "scan", str(traces), "--format", "json",
                               "--no-progress", *extra], capture_output=True, text=True, timeout=120)
        assert done.returncode in (0, 1), done.stderr
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]

    assert [d["reason"] for d in scan()] == ["barren"]
    found = scan("--config", str(config))
    assert found and found[0]["reason"] == "repeat_cycle"
