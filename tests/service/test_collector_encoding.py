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


# -- annotating a request in the Collector's encoding ------------------------------------


def _reversed_fields(raw: bytes, inner: dict[int, Any] | None = None) -> bytes:
    """A message's fields last to first (a repeated field's elements in their order), as Go's
    pdata writes them; ``inner``: field number -> how to write that field's payload."""
    out = bytearray()
    groups: dict[int, list[bytes]] = {}
    for number, field in _fields(raw):
        groups.setdefault(number, []).append(field)
    for number in sorted(groups, reverse=True):
        for field in groups[number]:
            write = (inner or {}).get(number)
            if write is None:
                out += field
                continue
            tag_and_length = _payload_start(field)
            out += field[:1] + _varint(len(payload := write(field[tag_and_length:]))) + payload
    return bytes(out)


def _payload_start(field: bytes) -> int:
    return _read_varint(field, _read_varint(field, 0)[1])[1]


def _as_collector_request(req: Any) -> bytes:
    """The whole request as the Collector writes it: resources, scopes and spans with their
    fields last to first (``schema_url``, the scopes, then ``resource``)."""
    def scope(raw: bytes) -> bytes:
        return _reversed_fields(raw, {2: _reversed_fields})

    def resource(raw: bytes) -> bytes:
        return _reversed_fields(raw, {2: scope})

    return _reversed_fields(req.SerializeToString(), {1: resource})


def _layout(raw: bytes, skip: set[tuple[int, int, int]]) -> list[Any]:
    """A request's bytes field by field down to its spans, except the spans at ``skip``
    (their places only): equal layouts are equal bytes but for those spans."""
    out: list[Any] = []
    for ri, (number, rs) in enumerate(f for f in _fields(raw) if f[0] == 1):
        rs_fields: list[Any] = []
        for n, field in _fields(rs[_payload_start(rs):]):
            if n != 2:
                rs_fields.append(field)
                continue
            si = sum(1 for x in rs_fields if isinstance(x, list))
            scope: list[Any] = []
            for k, sf in _fields(field[_payload_start(field):]):
                j = sum(1 for x in scope if isinstance(x, tuple) and x[0] == "span")
                if k == 2:
                    scope.append(("span", "annotated" if (ri, si, j) in skip else sf))
                else:
                    scope.append(sf)
            rs_fields.append(scope)
        out.append((number, rs_fields))
    return out


def _collector_batch() -> tuple[bytes, list[Any]]:
    other = [span(9, 1, None, "GET /", 0.0, 1.0, {"http.request.method": "GET"})]
    req = request(_graph_run(7) + other)
    req.resource_spans[0].schema_url = "https://opentelemetry.io/schemas/1.26.0"
    req.resource_spans[0].scope_spans[0].schema_url = "https://opentelemetry.io/schemas/1.26.0"
    raw = _as_collector_request(req)
    placements = BatchDetector(ProgressEngine(Config())).process(raw).placements
    assert placements and all(p.loc is not None for p in placements)
    return raw, placements


def test_an_annotated_request_keeps_every_other_byte_in_the_collectors_encoding() -> None:
    from otel_progress.service.annotate import annotated_request
    from otel_progress.service.otlp import ExportTraceServiceRequest

    raw, placements = _collector_batch()
    assert ExportTraceServiceRequest.FromString(raw).SerializeToString() != raw  # not the canonical order
    out, written = annotated_request(raw, placements)
    locs = {p.loc for p in placements if p.loc is not None}
    assert written == len(placements)
    # the resource, the scope, their schema urls, their order and every other span: as they came
    assert _layout(out, locs) == _layout(raw, locs)
    annotated = ExportTraceServiceRequest.FromString(out)
    for ri, si, j in locs:
        got = annotated.resource_spans[ri].scope_spans[si].spans[j]
        assert any(ev.name == "no_progress" or ev.name == "livelock" for ev in got.events)
        assert {kv.key for kv in got.attributes} >= {"progress.detected", "progress.reason"}


def test_a_request_whose_spans_carry_their_annotations_is_forwarded_as_it_came() -> None:
    from otel_progress.service.annotate import annotated_request
    from otel_progress.service.otlp import ExportTraceServiceRequest

    raw, placements = _collector_batch()
    once, _written = annotated_request(raw, placements)
    again = _as_collector_request(ExportTraceServiceRequest.FromString(once))  # as a next hop receives it
    out, written = annotated_request(again, placements)
    assert written == 0
    assert out == again


def test_a_request_the_splice_cannot_walk_is_annotated_whole() -> None:
    # an unknown field of the deprecated group wire type in the resource: the protobuf runtime
    # keeps it, the splice does not read groups: the request is encoded again, nothing lost
    from otel_progress.service.annotate import annotated_request
    from otel_progress.service.otlp import ExportTraceServiceRequest

    req = request(_graph_run(7))
    resource_spans = req.resource_spans[0].SerializeToString() + _varint(100 << 3 | 3) + _varint(100 << 3 | 4)
    raw = b"\x0a" + _varint(len(resource_spans)) + resource_spans
    placements = BatchDetector(ProgressEngine(Config())).process(raw).placements
    assert placements
    out, written = annotated_request(raw, placements)
    assert written == len(placements)
    annotated = ExportTraceServiceRequest.FromString(out)
    assert len(annotated.resource_spans[0].scope_spans[0].spans) == len(req.resource_spans[0].scope_spans[0].spans)
    for p in placements:
        ri, si, j = p.loc
        assert annotated.resource_spans[ri].scope_spans[si].spans[j].events
