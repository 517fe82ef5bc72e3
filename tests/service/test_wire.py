"""service/wire.py: splicing spans into a serialized request, every other byte kept."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_progress.service.otlp import ExportTraceServiceRequest
from otel_progress.service.wire import WireError, encode_varint, splice_request

from .helpers import request, span


def _two_resources() -> ExportTraceServiceRequest:
    first = request([span(1, n, None if n == 1 else 1, f"s{n}", n, n + 1) for n in range(1, 4)], "svc-a")
    second = request([span(2, n, None, f"t{n}", n, n + 1) for n in range(1, 3)], "svc-b")
    req = ExportTraceServiceRequest()
    req.resource_spans.extend([*first.resource_spans, *second.resource_spans])
    return req


def _renamed(name: str) -> Callable[[tuple[int, int, int], bytes], bytes]:
    def rewrite(_loc: tuple[int, int, int], raw: bytes) -> bytes:
        s = trace_pb2.Span.FromString(raw)
        s.name = name
        return s.SerializeToString()
    return rewrite


def test_a_span_is_replaced_and_nothing_else_changes() -> None:
    req = _two_resources()
    raw = req.SerializeToString()
    name = "a longer name: its span, scope and resource get longer length prefixes" * 3
    out = splice_request(raw, {(1, 0, 1)}, _renamed(name))
    expected = ExportTraceServiceRequest()
    expected.CopyFrom(req)
    expected.resource_spans[1].scope_spans[0].spans[1].name = name
    assert out == expected.SerializeToString()
    first = req.resource_spans[0]
    head = b"\x0a" + encode_varint(first.ByteSize()) + first.SerializeToString()
    assert raw.startswith(head) and out.startswith(head)  # the first resource: the bytes it came in


def test_nothing_changed_is_the_same_bytes() -> None:
    raw = _two_resources().SerializeToString()
    assert splice_request(raw, {(0, 0, 0), (1, 0, 1)}, lambda _loc, _raw: None) is raw
    assert splice_request(raw, set(), _renamed("x")) is raw


def test_added_scopes_go_to_their_resource_or_the_last() -> None:
    req = _two_resources()
    raw = req.SerializeToString()
    scope = trace_pb2.ScopeSpans(scope=common_pb2.InstrumentationScope(name="otel-progress.service"),
                                 spans=[span(2, 9, 1, "no_progress", 3, 3)]).SerializeToString()
    out = ExportTraceServiceRequest.FromString(splice_request(raw, set(), _renamed("x"), {0: [scope], 7: [scope]}))
    assert [len(rs.scope_spans) for rs in out.resource_spans] == [2, 2]
    assert out.resource_spans[0].scope_spans[1].spans[0].name == "no_progress"
    assert out.resource_spans[1].scope_spans[0] == req.resource_spans[1].scope_spans[0]


def test_bytes_it_cannot_walk_raise_wire_error() -> None:
    raw = _two_resources().SerializeToString()
    with pytest.raises(WireError):
        splice_request(raw[:-3], {(1, 0, 1)}, _renamed("x"))  # truncated
    with pytest.raises(WireError):
        splice_request(b"\x0b" + raw, {(0, 0, 0)}, _renamed("x"))  # a group
    with pytest.raises(WireError):
        splice_request(b"\x08" + b"\xff" * 11, {(0, 0, 0)}, _renamed("x"))  # a varint past 10 bytes


def test_encode_varint() -> None:
    assert [encode_varint(n) for n in (0, 1, 127, 128, 300)] == [b"\x00", b"\x01", b"\x7f", b"\x80\x01", b"\xac\x02"]
