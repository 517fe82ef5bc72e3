"""The real Qwen Code CLI exporting its telemetry over OTLP/gRPC straight to ``otel-progress
serve`` (inline mode), which forwards everything to a real OTLP/gRPC sink: the same failing
edit arrives as a ``progress.no_progress`` record (``error_recurrence``,
``progress.evidence_level = arguments``) and as ``progress.*`` attributes on the offending
``qwen-code.tool_call`` record; the healthy run arrives unannotated."""

from __future__ import annotations

from pathlib import Path

from .cli_capture import serving
from .test_qwen_code_cli import capture


def _grpc(port: int) -> dict[str, str]:
    return {"QWEN_TELEMETRY_OTLP_PROTOCOL": "grpc", "QWEN_TELEMETRY_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}


def _tool_calls(records: list[tuple[str, dict]]) -> list[dict]:
    return [a for name, a in records if name == "qwen-code.tool_call" or a.get("event.name") == "qwen-code.tool_call"]


def _run(scenario: str, tmp_path: Path, calls: int) -> list[tuple[str, dict]]:
    with serving() as (sink, service):
        capture(scenario, tmp_path, _grpc(service.port))
        # settle: the detection record travels with its batch
        return sink.wait(lambda r: len(_tool_calls(r)) >= calls, timeout=30, settle=0.5)


def test_the_failing_edit_is_annotated_by_the_service(tmp_path: Path) -> None:
    records = _run("failing-edit", tmp_path, 5)
    assert len(_tool_calls(records)) == 5, "every record forwarded"
    events = [a for name, a in records if name == "progress.no_progress"]
    assert [(e["progress.reason"], e["progress.turn"], e["progress.evidence_level"]) for e in events] == [
        ("error_recurrence", 4, "arguments")]
    marked = [a for a in _tool_calls(records) if a.get("progress.detected")]
    assert len(marked) == 1 and marked[0]["function_name"] == "edit"
    assert all("the line that is not there" not in str(v) for e in events for v in e.values())


def test_the_healthy_run_is_forwarded_unannotated(tmp_path: Path) -> None:
    records = _run("healthy", tmp_path, 5)
    assert len(_tool_calls(records)) == 5
    assert not any(name.startswith("progress.") for name, _ in records)
