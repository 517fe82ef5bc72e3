"""Spans as the Collector encodes them: Go's pdata writes a span's fields last to first
(the trace id at the end), Python's and Java's encoders first to last. The service reads
ids from a span's bytes without parsing it where it can; both layouts must give the same
detections (found with the LangGraph.js matrix behind the real Collector, where every
run's lineage was lost)."""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.trace.v1 import trace_pb2

from otel_progress import Config, ProgressEngine
from otel_progress.service.detector import BatchDetector

from .helpers import request, span


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _read_varint(message: bytes, i: int) -> tuple[int, int]:
    """The varint at ``i`` and the index after it."""
    value = shift = 0
    while True:
        byte = message[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _fields(message: bytes) -> list[tuple[int, bytes]]:
    """The top-level fields of a serialized message: each field's number and bytes (tag
    included)."""
    fields, i = [], 0
    while i < len(message):
        start = i
        tag, i = _read_varint(message, i)
        wire = tag & 7
        if wire == 0:
            i = _read_varint(message, i)[1]
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        elif wire == 2:
            length, i = _read_varint(message, i)
            i += length
        else:
            raise ValueError(f"wire type {wire}")
        fields.append((tag >> 3, message[start:i]))
    return fields


def _as_collector(req: Any) -> bytes:
    """The request with each span's fields written last to first, as the Collector does (a
    repeated field's elements in their order)."""
    out = bytearray()
    for rs in req.resource_spans:
        body = bytearray(b"\x0a" + _varint(rs.resource.ByteSize()) + rs.resource.SerializeToString())
        for ss in rs.scope_spans:
            scope = bytearray(b"\x0a" + _varint(ss.scope.ByteSize()) + ss.scope.SerializeToString())
            for s in ss.spans:
                raw = b"".join(b for _, b in sorted(_fields(s.SerializeToString()), key=lambda f: -f[0]))
                scope += b"\x12" + _varint(len(raw)) + raw
            body += b"\x12" + _varint(len(scope)) + scope
        out += b"\x0a" + _varint(len(body)) + body
    return bytes(out)


def _graph_run(trace: int) -> list[trace_pb2.Span]:
    """A LangGraph.js-like run (OpenInference): a root span no convention marks, plan-node
    CHAIN spans, and per step a model call and the same tool call with the same result."""
    spans = [span(trace, 1, None, "support_agent", 0.0, 30.0)]
    for t in range(1, 7):
        node, tools = 10 + 2 * t, 11 + 2 * t
        spans.append(span(trace, node, 1, "agent", 4.0 * t, 4.0 * t + 1, {"openinference.span.kind": "CHAIN"}))
        spans.append(span(trace, 100 + t, node, "ScriptedChatModel", 4.0 * t + 0.1, 4.0 * t + 0.9,
                          {"openinference.span.kind": "LLM", "llm.token_count.prompt": 100,
                           "llm.token_count.completion": 5}))
        spans.append(span(trace, tools, 1, "tools", 4.0 * t + 1.5, 4.0 * t + 3, {"openinference.span.kind": "CHAIN"}))
        spans.append(span(trace, 200 + t, tools, "lookup_order", 4.0 * t + 1.6, 4.0 * t + 2.5,
                          {"openinference.span.kind": "TOOL", "tool.name": "lookup_order",
                           "input.value": '{"order_id": "A1"}', "output.value": "order A1: shipped"}))
    return spans


def _detections(raw: bytes) -> list[tuple[str, int, str]]:
    result = BatchDetector(ProgressEngine(Config())).process(raw)
    return [(d.reason.value, d.turn, d.span_id) for d in result.new_detections]


def test_the_reversed_encoding_is_the_same_message() -> None:
    req = request(_graph_run(7))
    assert type(req).FromString(_as_collector(req)) == req
    assert _as_collector(req) != req.SerializeToString()


def test_spans_in_the_collectors_field_order_give_the_same_detections() -> None:
    req = request(_graph_run(7))
    python_order = _detections(req.SerializeToString())
    assert python_order and {r for r, _, _ in python_order} == {"repeat_cycle"}
    assert _detections(_as_collector(req)) == python_order


def test_other_traces_and_unrelated_spans_are_skipped_in_both_orders() -> None:
    # a second trace without GenAI spans, and one with a looping run: only the latter is detected
    other = [span(9, 1, None, "GET /", 0.0, 1.0, {"http.request.method": "GET"}),
             span(9, 2, 1, "SELECT", 0.1, 0.2, {"db.system": "postgresql"})]
    req = request(_graph_run(7) + other)
    found = _detections(_as_collector(req))
    assert found == _detections(req.SerializeToString()) and found
