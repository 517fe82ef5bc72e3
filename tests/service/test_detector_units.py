"""The detector's fast paths, without gRPC: the marker scan finds exactly the spans
``may_be_genai`` accepts, ``span_record`` reads attributes as the generic converter does,
the leading-bytes lineage filter agrees with a full parse, and concurrent requests are
detected in arrival order when they share a trace, without waiting for each other otherwise."""

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
from otel_progress.conventions.spans import SpanRecord, classify, read_tool_call
from otel_progress.service.detector import BatchDetector
from otel_progress.service.otlp import MARKERS, attributes_dict, marked_spans, may_be_genai, span_record

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


def _calls(trace: int, first: int, last: int) -> list:  # type: ignore[type-arg]
    """Tool calls of one run, turns first..last, each different (no detection)."""
    return [tool_span(trace, 1000 + t, 1, t, args={"q": f"{trace} {t}"}, result={"r": t})
            for t in range(first, last + 1)]


def _run_threads(*targets: Any) -> list[float]:
    """Start each target 20 ms after the previous one; return when each finished."""
    done = [0.0] * len(targets)

    def call(i: int, fn: Any) -> None:
        fn()
        done[i] = time.monotonic()

    threads = []
    for i, fn in enumerate(targets):
        t = threading.Thread(target=call, args=(i, fn))
        t.start()
        threads.append(t)
        time.sleep(0.02)
    for t in threads:
        t.join(30)
    return done


def test_requests_of_one_trace_are_detected_in_arrival_order() -> None:
    """A small request arriving while a large earlier one of the same trace is being read
    waits for it; otherwise the large one's tool calls would all be late."""
    detector = BatchDetector(ProgressEngine(Config()))
    large = request(_calls(7, 1, 3000)).SerializeToString()
    small = request(_calls(7, 3001, 3001)).SerializeToString()
    _run_threads(lambda: detector.process(large), lambda: detector.process(small))
    # (what tells the order: had the small one gone first, the large one's calls would be
    # late; the threads' finish times are not compared, the clock is read after each call
    # returns and a loaded machine can run the second thread's reading first)
    assert detector.metrics.value("progress.service.spans.late") == 0
    assert detector.metrics.value("progress.service.tool_calls") == 3001


def test_a_large_batch_does_not_hold_up_a_small_one_of_other_traces() -> None:
    detector = BatchDetector(ProgressEngine(Config()))
    large = request([s for t in range(100, 160) for s in _calls(t, 1, 50)]).SerializeToString()  # 3000 calls
    small = request(_calls(9, 1, 2)).SerializeToString()
    done = _run_threads(lambda: detector.process(large), lambda: detector.process(small))
    assert done[1] < done[0]  # the small one did not wait for the large one to finish
    assert detector.metrics.value("progress.service.tool_calls") == 3002
    assert detector.metrics.value("progress.service.spans.late") == 0


def test_unreadable_marked_span_is_counted_and_kept_out_of_the_lineage() -> None:
    raw_span = trace_pb2.Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 3, name="gen_ai.broken").SerializeToString()
    from otel_progress.service.otlp import SlimRequest

    slim = SlimRequest()
    slim.resource_spans.add().scope_spans.add().spans.append(raw_span)
    detector = BatchDetector(ProgressEngine(Config()))
    result = detector.process(slim.SerializeToString())
    assert (result.spans, result.genai) == (1, 0)
    assert detector.metrics.value("progress.service.spans.unreadable") == 1


def test_wasted_input_tokens_are_counted_when_a_looping_run_ends() -> None:
    """Issue 29, item 7: the model calls of the wasted stretch read 100 input tokens each;
    the run found nothing new from its first step on, so every call is in the stretch."""
    from .helpers import loop_trace

    detector = BatchDetector(ProgressEngine(Config()))
    result = detector.process(request(loop_trace(3, turns=6)).SerializeToString())
    first = result.new_detections[0]
    assert first.figures["wasted_input_tokens"] == 100 * first.turn
    assert detector.metrics.value("progress.service.wasted.input_tokens", {"gen_ai.agent.name": "researcher"}) == 600
