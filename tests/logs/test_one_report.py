"""One loop, one report: a coding CLI's logs and traces of one run (the golden captures of
the real CLIs, tests/coding_agents/golden) reach the engine twice, once per signal. Read
together, by ``otel-progress scan`` or by one ``serve`` (its TraceService and LogsService
share the run model), each run's loop is reported through one signal only: the richer
one if it found anything (scan), the first to report (serve)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_progress import Config
from otel_progress.scan import scan_paths
from otel_progress.service.options import ServiceConfig
from otel_progress.service.server import ProgressService

from .conftest import GOLDEN, b64_ids

PAIRS = sorted(p.name[: -len(".traces.jsonl")] for p in GOLDEN.glob("*.traces.jsonl"))
#: The captures where both signals detect the run's loop on their own.
BOTH_DETECT = {"claude-code-2.1.332-loop-details", "gemini-cli-0.61.0-loop", "gemini-cli-0.61.0-failing-edit",
               "qwen-code-0.24.4-loop", "qwen-code-0.24.4-failing-edit", "claude-code-2.1.332-failing-command-details"}


def _signal(trace_id: str) -> str:
    return "logs" if "|" in trace_id else "spans"


def _alone(path: Path) -> list[tuple[str, int, str]]:
    return [(d.reason.value, d.turn, d.span_id) for d in scan_paths([str(path)]).detections]


def test_the_captures_where_both_signals_detect_are_there() -> None:
    for name in BOTH_DETECT:
        assert _alone(GOLDEN / f"{name}.jsonl") and _alone(GOLDEN / f"{name}.traces.jsonl"), name


@pytest.mark.parametrize("name", PAIRS)
def test_scan_reports_one_signal_the_richer_that_detects(name: str) -> None:
    logs, traces = GOLDEN / f"{name}.jsonl", GOLDEN / f"{name}.traces.jsonl"
    found = scan_paths([str(logs), str(traces)]).detections
    signals = {_signal(d.trace_id) for d in found}
    assert len(signals) <= 1, [(d.reason.value, d.turn, d.trace_id) for d in found]
    by_signal = {"logs": _alone(logs), "spans": _alone(traces)}
    if not found:
        assert by_signal == {"logs": [], "spans": []}
        return
    (signal,) = signals
    assert sorted((d.reason.value, d.turn, d.span_id) for d in found) == sorted(by_signal[signal])
    if by_signal["spans"] and by_signal["logs"]:
        assert signal == "spans", "the traces carry the results: the richer evidence"


def _first_time(doc: dict[str, Any]) -> int:
    times = [int(r.get("timeUnixNano") or r.get("observedTimeUnixNano") or 0)
             for rl in doc.get("resourceLogs", []) for sl in rl.get("scopeLogs", []) for r in sl.get("logRecords", [])]
    times += [int(s["endTimeUnixNano"]) for rs in doc.get("resourceSpans", []) for ss in rs.get("scopeSpans", [])
              for s in ss.get("spans", [])]
    return min((t for t in times if t), default=0)


@pytest.mark.parametrize("name", sorted(BOTH_DETECT))
def test_one_serve_reports_one_signal(name: str) -> None:
    """The CLI's log and trace exports, in the order the CLI sent them (by time), to one
    service: its detections come through one signal."""
    docs = []
    for suffix in (".jsonl", ".traces.jsonl"):
        docs += [json.loads(line) for line in (GOLDEN / f"{name}{suffix}").read_text().splitlines() if line.strip()]
    docs.sort(key=_first_time)
    service = _service()
    found = [d for doc in docs for d in _send(service, doc)]
    found += service.detector.maintain(now=1e12) + service.logs.maintain(now=1e12)
    assert found, name
    assert len({_signal(d.trace_id) for d in found}) == 1, [(d.reason.value, d.turn, d.trace_id) for d in found]


def _service() -> ProgressService:
    return ProgressService(ServiceConfig(listen="127.0.0.1:0", health_listen="", forward_endpoint="127.0.0.1:9"),
                           Config())


def _send(service: ProgressService, doc: dict[str, Any]) -> list[Any]:
    if "resourceLogs" in doc:
        raw = json_format.ParseDict(b64_ids(doc), ExportLogsServiceRequest(), ignore_unknown_fields=True)
        return service.logs.process(raw.SerializeToString()).new_detections
    raw = json_format.ParseDict(b64_ids(doc), ExportTraceServiceRequest(), ignore_unknown_fields=True)
    return service.detector.process(raw.SerializeToString()).new_detections


def _documents(name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return tuple([json.loads(line) for line in (GOLDEN / f"{name}{suffix}").read_text().splitlines() if line.strip()]
                 for suffix in (".jsonl", ".traces.jsonl"))  # type: ignore[return-value]


def test_serve_holds_the_poorer_signal_back_while_the_richer_one_may_report() -> None:
    """Gemini CLI's spans carry the results (full evidence), its logs only the arguments.
    Once its spans were seen, the logs' detection waits: it is dropped when the spans
    report the loop, and reported at the end of the log run if they never do."""
    logs, traces = _documents("gemini-cli-0.61.0-loop")
    ordered = sorted(({"resourceSpans": [{**rs, "scopeSpans": [{**ss, "spans": [span]}]}]}
                      for doc in traces for rs in doc["resourceSpans"] for ss in rs["scopeSpans"]
                      for span in ss["spans"]), key=_first_time)  # a request per span, as they ended
    first = next(i for i, doc in enumerate(ordered) if "tool_call" in json.dumps(doc))
    ordered = [ordered[first], *ordered[:first], *ordered[first + 1:]]
    for rest, expect in ((ordered[1:], "spans"), ([], "logs")):
        service = _service()
        assert _send(service, ordered[0]) == []  # the spans are seen (no loop yet)
        assert [d for doc in logs for d in _send(service, doc)] == []  # held back
        found = [d for doc in rest for d in _send(service, doc)]
        found += service.detector.maintain(now=1e12) + service.logs.maintain(now=1e12)
        assert found and {_signal(d.trace_id) for d in found} == {expect}, found
