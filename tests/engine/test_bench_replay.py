"""The engine benchmark's recorded replay (``bench/bench_engine.py``) makes the calls the
run model makes: replayed into a fresh engine, the same detections as the analysis itself."""

from __future__ import annotations

from bench.bench_engine import record_replay, replay
from otel_progress import Config, ProgressEngine
from otel_progress.scan.analyse import analyse_trace
from otel_progress.service.otlp import span_record
from tests.service.helpers import loop_trace, progressing_trace


def test_the_recorded_replay_finds_what_the_analysis_finds() -> None:
    for spans in (loop_trace(3, turns=6), progressing_trace(4)):
        records = [span_record(s) for s in spans]
        ops, calls = record_replay(records)
        assert len(calls) == 6 and any(name == "end_trace" for name, _, _ in ops)
        expected = len(analyse_trace(records, ProgressEngine(Config())).detections)
        assert replay(ProgressEngine(Config()), [ops]) == expected
    assert expected == 0 and len(analyse_trace([span_record(s) for s in loop_trace(3, turns=6)],
                                                ProgressEngine(Config())).detections) == 3
