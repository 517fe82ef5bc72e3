"""The detector's fast paths, without gRPC: the marker scan finds exactly the spans
``may_be_genai`` accepts, the leading-bytes lineage filter agrees with a full parse, and
concurrent requests are detected one at a time in the order they arrived."""

from __future__ import annotations

import random
import threading
import time

from opentelemetry.proto.trace.v1 import trace_pb2

from otel_progress import Config, ProgressEngine
from otel_progress.service.detector import BatchDetector
from otel_progress.service.otlp import MARKERS, marked_spans, may_be_genai

from .helpers import http_span, request, span, tool_span


def test_marked_spans_are_exactly_those_may_be_genai_accepts() -> None:
    rnd = random.Random(7)
    # Markers whole, cut in two (so that a concatenation can straddle spans), and filler.
    pieces = [*MARKERS, b"x", b"", b"gen_", b"ai.", b".span", b".kind", b"mcp.method", b".name", b"llm.",
              b"token_count", b"gen_ai"]
    for _ in range(5000):
        spans = [b"".join(rnd.choice(pieces) for _ in range(rnd.randrange(6))) for _ in range(rnd.randrange(12))]
        assert marked_spans(spans) == [j for j, s in enumerate(spans) if may_be_genai(s)], spans


def test_spans_with_an_unusual_layout_are_still_read_for_lineage() -> None:
    """A plan-node span with a trace_state (so its parent id is not where the fast path
    looks) is still an ancestor: the tool span under it gets its name as the node."""
    plan = span(1, 2, 9, "plan step", 0.0, 5.0)
    plan.trace_state = "vendor=1"
    other = http_span(1, 3, 9, 0.5)  # usual layout, an ancestor of nothing: not needed
    tool = tool_span(1, 4, 2, 1)
    engine = ProgressEngine(Config())
    nodes = []
    observe = engine.observe
    engine.observe = lambda call, **kw: (nodes.append(call.node), observe(call, **kw))[1]  # type: ignore[method-assign]
    detector = BatchDetector(engine)
    detector.process(request([plan, other, tool]).SerializeToString())
    assert nodes == ["plan step"]
    assert detector.metrics.value("progress.service.state.spans") == 2  # the tool and its plan node


def test_concurrent_requests_are_detected_one_at_a_time_in_arrival_order() -> None:
    detector = BatchDetector(ProgressEngine(Config()))
    running: list[int] = []
    order: list[int] = []
    overlap = threading.Event()
    real = detector._process

    def slow(raw: bytes):  # type: ignore[no-untyped-def]
        running.append(1)
        if len(running) > 1:
            overlap.set()
        order.append(int(raw[-1]))
        time.sleep(0.02)
        running.pop()
        return real(raw)

    detector._process = slow  # type: ignore[method-assign]
    threads = []
    for i in range(10):
        # An empty ExportTraceServiceRequest with an unknown trailing field tagging it i.
        raw = b"\x78" + bytes([i])
        t = threading.Thread(target=detector.process, args=(raw,))
        t.start()
        threads.append(t)
        time.sleep(0.002)  # arrival order 0, 1, 2, ...
    for t in threads:
        t.join(10)
    assert not overlap.is_set()
    assert order == list(range(10))


def test_a_stuck_request_delays_the_next_one_at_most_order_wait() -> None:
    detector = BatchDetector(ProgressEngine(Config()))
    detector.order_wait = 0.2
    release = threading.Event()
    real = detector._process

    def stuck_first(raw: bytes):  # type: ignore[no-untyped-def]
        if raw == b"\x78\x00":
            release.wait(10)
        return real(raw)

    detector._process = stuck_first  # type: ignore[method-assign]
    first = threading.Thread(target=detector.process, args=(b"\x78\x00",))
    first.start()
    time.sleep(0.02)
    started = time.monotonic()
    result = detector.process(b"\x78\x01")
    waited = time.monotonic() - started
    release.set()
    first.join(10)
    assert result.spans == 0 and 0.15 <= waited < 2.0
    # The tickets caught up: a new request does not wait.
    started = time.monotonic()
    detector.process(b"\x78\x02")
    assert time.monotonic() - started < 0.15


def test_unreadable_marked_span_is_counted_and_kept_out_of_the_lineage() -> None:
    raw_span = trace_pb2.Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 3, name="gen_ai.broken").SerializeToString()
    from otel_progress.service.otlp import SlimRequest

    slim = SlimRequest()
    slim.resource_spans.add().scope_spans.add().spans.append(raw_span)
    detector = BatchDetector(ProgressEngine(Config()))
    result = detector.process(slim.SerializeToString())
    assert (result.spans, result.genai) == (1, 0)
    assert detector.metrics.value("progress.service.spans.unreadable") == 1
