"""The detector's fast paths, without gRPC: the marker scan finds exactly the spans
``may_be_genai`` accepts, ``span_record`` reads attributes as the generic converter does,
the leading-bytes lineage filter agrees with a full parse, and concurrent requests are
detected one at a time in the order they arrived."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_progress import Config, ProgressEngine
from otel_progress.service.detector import BatchDetector
from otel_progress.service.otlp import MARKERS, attributes_dict, marked_spans, may_be_genai, span_record
from otel_progress.spans import SpanRecord, classify, read_tool_call

from .helpers import http_span, request, span, tool_span


def test_marked_spans_are_exactly_those_may_be_genai_accepts() -> None:
    rnd = random.Random(7)
    # Markers whole, cut in two (so that a concatenation can straddle spans), and filler.
    pieces = [*MARKERS, b"x", b"", b"gen_", b"ai.", b".span", b".kind", b"mcp.method", b".name", b"llm.",
              b"token_count", b"gen_ai"]
    for _ in range(5000):
        spans = [b"".join(rnd.choice(pieces) for _ in range(rnd.randrange(6))) for _ in range(rnd.randrange(12))]
        assert marked_spans(spans) == [j for j, s in enumerate(spans) if may_be_genai(s)], spans


def _any_values() -> list[common_pb2.AnyValue]:
    """AnyValues of every kind, including the empty and falsy ones."""
    av = common_pb2.AnyValue
    return [
        av(), av(string_value=""), av(string_value="x"), av(string_value='"quoted"'),
        av(string_value="execute_tool"), av(string_value="TOOL"), av(string_value="tool"),
        av(string_value="tools/call"), av(string_value="1.5"), av(string_value="a, b"),
        av(int_value=0), av(int_value=7), av(bool_value=False), av(bool_value=True),
        av(double_value=0.0), av(double_value=2.5), av(bytes_value=b""), av(bytes_value=b"\xffx"),
        av(array_value=common_pb2.ArrayValue(values=[av(string_value="e1"), av(int_value=2)])),
        av(array_value=common_pb2.ArrayValue()),
        av(kvlist_value=common_pb2.KeyValueList(values=[common_pb2.KeyValue(key="k", value=av(string_value=""))])),
    ]


def test_span_record_reads_attributes_as_the_generic_converter_does() -> None:
    """Random tool-ish spans of every convention, with values of every type (and repeated
    keys): the record's attributes equal ``attributes_dict``'s, so the tool call and the
    classification are the same."""
    rnd = random.Random(11)
    keys = ["gen_ai.operation.name", "openinference.span.kind", "traceloop.span.kind", "mcp.method.name",
            "gen_ai.tool.name", "tool.name", "traceloop.entity.name", "gen_ai.tool.call.arguments",
            "input.value", "traceloop.entity.input", "gen_ai.tool.call.result", "output.value",
            "traceloop.entity.output", "error.type", "gen_ai.agent.id", "gen_ai.agent.name", "agent.name",
            "progress.plan.node", "progress.state", "progress.goal.distance", "progress.measure",
            "progress.evidence", "progress.obligations", "gen_ai.usage.input_tokens", "other"]
    values = _any_values()
    for n in range(2000):
        s = tool_span(1, 2 + n, 1, 1)
        del s.attributes[:]
        for _ in range(rnd.randrange(8)):
            s.attributes.add(key=rnd.choice(keys)).value.CopyFrom(rnd.choice(values))
        if rnd.random() < 0.3:
            s.status.code = trace_pb2.Status.STATUS_CODE_ERROR
            s.status.message = rnd.choice(["", "boom"])
        if rnd.random() < 0.3:
            ev = s.events.add(name="exception")
            ev.attributes.add(key="exception.type").value.CopyFrom(rnd.choice(values))
        record = span_record(s)
        generic = attributes_dict(s.attributes)
        assert record.attributes == generic
        assert [type(v) for v in record.attributes.values()] == [type(v) for v in generic.values()]
        reference = replace(record, attributes=generic)
        assert _outcome(classify, record) == _outcome(classify, reference)
        assert _outcome(read_tool_call, record) == _outcome(read_tool_call, reference)


def _outcome(read: Callable[[SpanRecord], Any], record: SpanRecord) -> Any:
    """What a reader returns, or the type of what it raises (an odd value may do that)."""
    try:
        return read(record)
    except Exception as exc:  # the exception type is the outcome compared
        return type(exc)


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
