"""Fault tests of the service (issue 10): the memory budget under a churn of distinct
traces, undeliverable batches, overload admission, a large batch beside small ones, the
health port's limits. Everything runs on 127.0.0.1 with real grpcio servers, each test
bounded in time."""

from __future__ import annotations

import gc
import time
import tracemalloc

from otel_progress import Config, ProgressEngine
from otel_progress.service.detector import BatchDetector
from otel_progress.service.metrics import ServiceMetrics

from .helpers import chat_span, request, tool_span


def _open_trace(trace: int, calls: int) -> bytes:
    """A trace whose root never arrives: distinct calls, so nothing is detected and nothing closes it."""
    spans = []
    for k in range(1, calls + 1):
        spans.append(chat_span(trace, 100 + k, 1, k))
        spans.append(tool_span(trace, 200 + k, 1, k, args={"q": f"{trace}-{k}"}, result={"items": [k]},
                               agent="researcher"))
    return request(spans).SerializeToString()


def test_memory_budget_holds_under_a_churn_of_distinct_traces() -> None:
    budget = 3 * 1024 * 1024
    metrics = ServiceMetrics()
    detector = BatchDetector(ProgressEngine(Config()), metrics, max_traces=100_000, max_spans_per_trace=100_000,
                             max_state_bytes=budget, batch_cache=0)
    batches = [_open_trace(t, 10) for t in range(1, 1201)]
    gc.collect()
    tracemalloc.start()
    try:
        deadline = time.monotonic() + 60
        half = 0
        for n, raw in enumerate(batches, 1):
            detector.process(raw)
            assert detector.held_bytes <= budget, (n, detector.held_bytes)
            if n == len(batches) // 2:
                gc.collect()
                half = tracemalloc.get_traced_memory()[0]
            assert time.monotonic() < deadline
        gc.collect()
        end = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    evicted = metrics.value("progress.service.traces.evicted_early", {"reason": "memory_budget"})
    assert evicted > 0
    assert detector.trace_count + evicted == len(batches)
    # The state stopped growing once the budget was reached: the second half of the
    # churn (600 more traces, ~8 MiB of state unbounded) added almost nothing.
    assert end - half < budget * 0.15, (half, end)
    assert metrics.value("progress.service.state.bytes") == detector.held_bytes


def test_held_bytes_estimate_tracks_what_tracemalloc_measures() -> None:
    for calls, traces in ((1, 400), (20, 100), (400, 4)):
        detector = BatchDetector(ProgressEngine(Config()), max_traces=100_000, max_spans_per_trace=100_000,
                                 batch_cache=0)
        batches = [_open_trace(t, calls) for t in range(1, traces + 1)]
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for raw in batches:
                detector.process(raw)
            gc.collect()
            real = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        ratio = detector.held_bytes / real
        assert 0.9 <= ratio <= 1.6, (calls, detector.held_bytes, real)
