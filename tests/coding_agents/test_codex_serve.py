"""The real Codex CLI exporting its logs over OTLP/gRPC straight to ``otel-progress serve``
(inline mode), which forwards everything to a real OTLP/gRPC sink: the loop's detection
arrives in the sink as a ``progress.no_progress`` record and as ``progress.*`` attributes on
the offending ``codex.tool_result`` record; the healthy run arrives unannotated.
"""

from __future__ import annotations

from pathlib import Path

from .cli_capture import serving
from .test_codex_cli import grpc_exporter, run_codex


def _tool_results(records: list[tuple[str, dict]]) -> list[dict]:
    return [a for name, a in records if name == "codex.tool_result"]


def test_the_loop_is_annotated_by_the_service(tmp_path: Path) -> None:
    with serving() as (sink, service):
        run_codex("loop", tmp_path, grpc_exporter(f"127.0.0.1:{service.port}"))
        records = sink.wait(lambda r: len(_tool_results(r)) >= 6 and any(n == "progress.no_progress" for n, _ in r))
    assert len(_tool_results(records)) == 6, "every record forwarded"
    events = [a for name, a in records if name == "progress.no_progress"]
    assert events, "a detection record"
    # (the same command re-issued once is a re-check; the third copy is the loop)
    assert events[0]["progress.reason"] == "repeat_cycle" and events[0]["progress.turn"] == 3
    assert "progress.evidence_level" not in events[0]
    marked = [a for a in _tool_results(records) if a.get("progress.detected")]
    assert marked and marked[0]["progress.reason"] == "repeat_cycle"
    # annotations never carry the raw arguments or output
    assert all("cat notes.txt" not in str(v) and "alpha" not in str(v) for e in events for v in e.values())


def test_the_healthy_run_is_forwarded_unannotated(tmp_path: Path) -> None:
    with serving() as (sink, service):
        run_codex("healthy", tmp_path, grpc_exporter(f"127.0.0.1:{service.port}"))
        # settle: a late detection would have arrived by then
        records = sink.wait(lambda r: len(_tool_results(r)) >= 5, settle=1.0)
    assert len(_tool_results(records)) == 5
    assert not any(name.startswith("progress.") for name, _ in records)
    assert not any("progress.detected" in a for a in _tool_results(records))
