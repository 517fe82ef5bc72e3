"""The real Gemini CLI exporting over OTLP/gRPC straight to ``otel-progress serve`` (inline
mode), which forwards everything to a real OTLP/gRPC sink. Logs only: the same failing
``replace`` arrives as a ``progress.no_progress`` record (``error_recurrence``, marked
``progress.evidence_level = arguments``) and the offending ``gemini_cli.tool_call`` record
is marked. With ``telemetry.traces`` too the service sees each call twice (a log run and a
trace run, see docs/coding-agents.md) and reports the loop once, through one signal
(docs/runs.md, *One loop, one report*): the traces' ``repeat_cycle`` on the forwarded spans
when the spans reached the service before the logs' detection, else the logs' record.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .cli_capture import serving
from .test_gemini_cli import run_gemini


def _tool_calls(records: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [a for name, a in records if name == "gemini_cli.tool_call"]


def test_the_failing_edit_is_annotated_by_the_service(tmp_path: Path) -> None:
    with serving() as (sink, service):
        run_gemini("failing-edit", tmp_path, f"http://127.0.0.1:{service.port}", protocol="grpc", traces=False)
        records = sink.wait(lambda r: len(_tool_calls(r)) >= 5 and any(n == "progress.no_progress" for n, _ in r))
    assert len(_tool_calls(records)) == 5, "every record forwarded"
    events = [a for name, a in records if name == "progress.no_progress"]
    assert [e["progress.reason"] for e in events] == ["error_recurrence"]
    assert events[0]["progress.evidence_level"] == "arguments" and events[0]["progress.identical_requests"] == 3
    marked = [a for a in _tool_calls(records) if a.get("progress.detected")]
    assert [a["function_name"] for a in marked] == ["replace"]
    assert all("old_string" not in str(v) for v in events[0].values()), "no raw arguments in annotations"


def test_with_traces_the_loop_is_caught_on_the_spans_too(tmp_path: Path) -> None:
    with serving() as (sink, service):
        run_gemini("loop", tmp_path, f"http://127.0.0.1:{service.port}", protocol="grpc", traces=True)
        records = sink.wait(lambda r: len(_tool_calls(r)) >= 8)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(e[1] == "no_progress" for e in sink.span_events()) \
                and not any(n == "progress.no_progress" for n, _ in sink.log_records()):
            time.sleep(0.2)
        time.sleep(2)  # (what the other signal brings after the first report)
        spans = sink.span_events()
        records = sink.log_records()
    logged = [a for name, a in records if name == "progress.no_progress"]
    traced = [a for span, event, a in spans if span == "tool_call" and event == "no_progress"]
    assert bool(logged) != bool(traced), (logged, traced)  # one loop, one report
    if traced:
        assert traced[0]["progress.reason"] == "repeat_cycle" and traced[0]["progress.turn"] == 4
    else:
        assert logged[0]["progress.reason"] == "frequency" and logged[0]["progress.evidence_level"] == "arguments"
