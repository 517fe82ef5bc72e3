"""Log runs past a bound (issue 19, items 3 and 4): more coding-agent sessions open at once
than ``max_runs``, or than the memory budget holds. Runs ended early go through the engine
(what they found is kept), are reported (scan) or counted (serve), and the service's
``--max-state-mib`` budget and ``progress.service.state.bytes`` gauge account them."""

from __future__ import annotations

import gc
import io
import json
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from otel_progress import Config, ProgressEngine
from otel_progress.runs.budget import StateBudget
from otel_progress.runs.model import RunModel
from otel_progress.scan import run_scan
from otel_progress.service.detector import BatchDetector
from otel_progress.service.logs import LogsDetector
from otel_progress.service.metrics import ServiceMetrics

from .conftest import b64_ids, documents, golden

CONVERSATION = "01a23128-9b8f-7d63-91ab-f96e27715538"  # the Codex capture's conversation.id


def _interleaved(runs: int) -> list[str]:
    """``runs`` looping Codex runs (the golden capture, a fresh conversation each), all open
    at once: request i of every run, then request i + 1."""
    requests = [json.dumps(d) for d in documents(golden("codex-0.171.0-loop.jsonl"))]
    ids = [str(uuid.UUID(int=n + 1)) for n in range(runs)]
    return [request.replace(CONVERSATION, c) for request in requests for c in ids]


def _scan(path: Path, config: Path | None = None) -> tuple[list[dict[str, Any]], str]:
    out, err = io.StringIO(), io.StringIO()
    run_scan([str(path)], config_path=str(config) if config else None, stdout=out, stderr=err)
    return [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


def test_scan_reports_log_runs_ended_past_max_runs_and_keeps_their_detections(tmp_path: Path) -> None:
    path = tmp_path / "codex150.jsonl"
    path.write_text("\n".join(_interleaved(150)) + "\n")
    config = tmp_path / "max100.json"
    config.write_text(json.dumps({"max_runs": 100}))
    unbounded, err = _scan(path)
    assert "ended early" not in err
    assert len({d["trace_id"] for d in unbounded}) == 150  # every run's loop is found
    bounded, err = _scan(path, config)
    assert "log run(s) ended early: more runs were open at once than max_runs (100)" in err, err
    assert {d["trace_id"] for d in bounded} == {d["trace_id"] for d in unbounded}


def _proto(lines: list[str]) -> list[bytes]:
    return [json_format.ParseDict(b64_ids(json.loads(line)), ExportLogsServiceRequest(),
                                  ignore_unknown_fields=True).SerializeToString() for line in lines]


def _serve(raws: list[bytes], detector: LogsDetector) -> list[Any]:
    found: list[Any] = []
    for raw in raws:
        found += detector.process(raw).new_detections
    return found + detector.maintain(now=1e12)


def test_serve_counts_log_runs_ended_past_max_runs_and_keeps_their_detections() -> None:
    raws = _proto(_interleaved(150))
    unbounded = _serve(raws, LogsDetector(ProgressEngine(Config()), ServiceMetrics()))
    metrics = ServiceMetrics()
    bounded = _serve(raws, LogsDetector(ProgressEngine(Config()), metrics, max_runs=100))
    assert metrics.value("progress.service.log_runs.ended_early", {"reason": "max_runs"}) > 0
    assert {d.trace_id for d in bounded} == {d.trace_id for d in unbounded} and len(unbounded) >= 150


def test_log_runs_are_held_within_the_memory_budget() -> None:
    """A churn of 600 distinct sessions, each left open (no idle end), under a budget that
    holds about 100: the estimate stays within it, the gauge shows it, the runs ended to
    make room are counted and what they found is kept."""
    raws = _proto(_interleaved(600))
    budget = StateBudget(100 * 10 * 1024)
    metrics = ServiceMetrics()
    model = RunModel(ProgressEngine(Config()))
    traces = BatchDetector(model.engine, metrics, model=model, budget=budget)  # as serve builds them: one budget
    detector = LogsDetector(model, metrics, budget=budget)
    found = []
    for raw in raws:
        found += detector.process(raw).new_detections
        assert budget.held <= budget.limit, budget.held
    assert 0 < metrics.value("progress.service.state.bytes") == budget.held == traces.held_bytes + detector.held_bytes
    assert metrics.value("progress.service.log_runs.ended_early", {"reason": "memory_budget"}) > 400
    found += detector.maintain(now=1e12)
    assert len({d.trace_id for d in found}) == 600


def test_the_log_runs_estimate_tracks_what_tracemalloc_measures() -> None:
    for runs in (50, 300):
        detector = LogsDetector(ProgressEngine(Config()), ServiceMetrics())
        raws = _proto(_interleaved(runs))
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for raw in raws:
                detector.process(raw)
            gc.collect()
            real = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert 0.9 <= detector.held_bytes / real <= 1.6, (runs, detector.held_bytes, real)
