"""The real Claude Code CLI exporting its logs over OTLP/gRPC straight to ``otel-progress
serve`` (inline mode), which forwards everything to a real OTLP/gRPC sink: with
``OTEL_LOG_TOOL_DETAILS=1`` the loop's detection arrives as a ``progress.no_progress``
record (``progress.evidence_level = arguments``) and as ``progress.*`` attributes on the
offending ``claude_code.tool_result`` record; by default (names only) the same loop
arrives unannotated, by design; annotations never carry the raw command."""

from __future__ import annotations

from pathlib import Path

from .cli_capture import serving
from .test_claude_code_cli import capture


def _grpc(port: int) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_TRACES_EXPORTER": "none"}


def _tool_results(records: list[tuple[str, dict]]) -> list[dict]:
    return [a for name, a in records if name in ("claude_code.tool_result", "tool_result")
            or a.get("event.name") == "tool_result"]


def _run(scenario: str, tmp_path: Path, calls: int) -> list[tuple[str, dict]]:
    with serving() as (sink, service):
        capture(scenario, tmp_path, _grpc(service.port))
        # settle: the detection record travels with its batch
        return sink.wait(lambda r: len(_tool_results(r)) >= calls, timeout=20, settle=0.5)


def test_the_loop_with_details_is_annotated_by_the_service(tmp_path: Path) -> None:
    records = _run("loop-details", tmp_path, 6)
    assert len(_tool_results(records)) == 6, "every record forwarded"
    events = [a for name, a in records if name == "progress.no_progress"]
    assert [(e["progress.reason"], e["progress.turn"], e["progress.evidence_level"]) for e in events] == [
        ("frequency", 4, "arguments")]
    marked = [a for a in _tool_results(records) if a.get("progress.detected")]
    assert len(marked) == 1 and marked[0]["progress.reason"] == "frequency"
    assert all("cat notes.txt" not in str(v) for e in events for v in e.values())


def test_the_loop_by_default_is_forwarded_unannotated(tmp_path: Path) -> None:
    records = _run("loop-default", tmp_path, 6)
    assert len(_tool_results(records)) == 6
    assert not any(name.startswith("progress.") for name, _ in records)
    assert not any("progress.detected" in a for a in _tool_results(records))
