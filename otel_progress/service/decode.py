"""The service's decode stage: the bytes of an ``ExportTraceServiceRequest`` to the spans
the detector analyses (:class:`Item`) and the ids of the others (their lineage).

Nothing is decoded that the analysis does not use:

* the request is read *slim* (:data:`~.otlp.SlimRequest`): resources, scopes and spans
  stay bytes; a span's trace id is read from its leading bytes where it is there (the
  Collector writes a span's fields last to first: such a span's ids are parsed);
* a span is of no interest unless its bytes contain one of the span conventions' marker
  strings (:func:`~.otlp.marked_spans`, C-level substring searches); the others are never
  parsed, except the leading bytes (ids) of those in a trace with GenAI spans
  (:func:`lineage_spans`);
* only a marked span is decoded (:func:`~.otlp.span_record`), and kept when a convention
  classifies it as a tool, agent or model call; its resource's attributes are decoded
  once per resource, for the resources that have such spans.

A span the protobuf runtime cannot decode (bad encoding, or values nested past its
recursion limit of 100 levels: an attribute ``kvlistValue`` about 32 deep) is not
analysed: it is counted (``unreadable``), and it stays in the request as the bytes it
came in. Reading the request itself never decodes a span, so no span can make the rest
of the request unreadable.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.trace.v1 import trace_pb2

from ..conventions.spans import SpanKind, SpanRecord, classify
from .otlp import SlimRequest, SlimSpan, marked_spans, resource_attributes, span_record

__all__ = ["DecodedRequest", "Item", "Loc", "MalformedRequest", "decode_spans", "lineage_spans", "read_request"]

Loc = tuple[int, int, int]  # (resource index, scope index, span index)

# Python's and Java's encoders write a span's fields in field order, so it starts with its
# trace id; the Collector's (Go pdata) writes them last to first: read those parsed.
_TRACE_ID_HEAD = b"\x0a\x10"  # field 1 (trace_id), length 16: the usual start of a span
_SPAN_ID_TAG = b"\x12\x08"  # field 2 (span_id), length 8: follows the trace id
_PARENT_TAG = b"\x22\x08"  # field 4 (parent_span_id), length 8 (when there is no trace_state)
# A span's leading bytes in the usual layout: the trace id (after its tag and length), the
# span id's tag, the span id and the parent span id's tag.
_HEAD = struct.Struct("2x16s2s8s2s")
# A span's last bytes as the Collector writes it: the parent span id's tag and id (when it
# has a parent and no trace_state), the span id's tag and id, the trace id's tag and id.
_TAIL = struct.Struct("2s8s2s8s2s16s")
_FromString = trace_pb2.Span.FromString


class MalformedRequest(ValueError):
    """The request bytes are not an ``ExportTraceServiceRequest``."""


@dataclass(slots=True)
class Item:
    """A span the detector analyses: where it is in the request, its record and kind, its
    bytes and its resource's attributes (for a caller that holds the span to decode it
    again later)."""

    loc: Loc
    record: SpanRecord
    kind: SpanKind
    raw: bytes = b""
    resource: Mapping[str, Any] | None = None


class DecodedRequest:
    """A request read slim: its message and its spans' bytes by scope."""

    __slots__ = ("scopes", "slim", "total")

    def __init__(self, slim: Any, scopes: list[tuple[int, int, list[bytes]]]) -> None:
        self.slim = slim
        self.scopes = scopes
        self.total = sum(len(spans) for _ri, _si, spans in scopes)

    def trace_ids(self) -> frozenset[bytes]:
        """The trace ids of all its spans (read from their leading bytes where they have the
        usual layout)."""
        out: set[bytes] = set()
        for _ri, _si, spans in self.scopes:
            out.update(_trace_id(b) for b in spans)
        return frozenset(out)


def read_request(raw: bytes) -> DecodedRequest:
    """The request read slim. Raises :class:`MalformedRequest` for bytes that are not an
    ``ExportTraceServiceRequest`` (never for a span: spans are not decoded here)."""
    try:
        slim = SlimRequest.FromString(raw)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise MalformedRequest(f"not an OTLP ExportTraceServiceRequest: {exc}") from exc
    return DecodedRequest(slim, [(ri, si, list(ss.spans)) for ri, rs in enumerate(slim.resource_spans)
                                 for si, ss in enumerate(rs.scope_spans)])


def decode_spans(request: DecodedRequest) -> tuple[list[Item], list[bytes], int]:
    """``(items, others, unreadable)``: the tool, agent and model spans, in request order;
    the bytes of the spans that are not (for :func:`lineage_spans`: the unmarked spans in
    request order, then the marked spans no convention classified); and how many marked
    spans could not be decoded (left out of both)."""
    marked: list[tuple[Loc, bytes]] = []
    others: list[bytes] = []
    for ri, si, spans in request.scopes:
        start = 0
        for j in marked_spans(spans):
            others.extend(spans[start:j])
            start = j + 1
            marked.append(((ri, si, j), spans[j]))
        others.extend(spans[start:])
    items: list[Item] = []
    unreadable = 0
    resources: dict[int, dict[str, Any]] = {}  # resource index -> its attributes, read when needed
    resource_spans = request.slim.resource_spans
    for loc, span_bytes in marked:
        ri = loc[0]
        resource = resources.get(ri)
        if resource is None:
            resource = resources[ri] = resource_attributes(resource_spans[ri].resource)
        try:
            record = span_record(_FromString(span_bytes), resource)
            kind = classify(record)
        except Exception:  # a span we cannot read is counted and forwarded untouched
            unreadable += 1
            continue
        if kind is not SpanKind.OTHER:
            items.append(Item(loc, record, kind, span_bytes, resource))
        else:
            others.append(span_bytes)
    return items, others, unreadable


def lineage_spans(items: Sequence[Item], others: Sequence[bytes]) -> list[tuple[str, str, str, str]]:
    """The spans of ``others`` worth remembering, as ``(trace id, span id, parent id,
    name)``: in a trace of the batch's GenAI spans, and either an ancestor of one of them
    (plan nodes, tools nested in tools) or a root span (the trace is complete). Read from
    the span's leading bytes where they have the usual layout (trace_id, span_id, then
    parent_span_id), parsed otherwise (ids and name only)."""
    traces = {bytes.fromhex(it.record.trace_id) for it in items}
    wanted = {bytes.fromhex(it.record.parent_id) for it in items if it.record.parent_id}
    out: list[tuple[str, str, str, str]] = []
    for span_bytes in others:
        if _skipped(span_bytes, traces, wanted):
            continue
        try:
            slim = SlimSpan.FromString(span_bytes)
        except DecodeError:
            continue
        if len(slim.span_id) != 8 or slim.trace_id not in traces:
            continue
        parent = slim.parent_span_id
        has_parent = len(parent) == 8 and any(parent)
        if slim.span_id not in wanted and has_parent:
            continue
        if has_parent:
            wanted.add(bytes(parent))
        out.append((slim.trace_id.hex(), slim.span_id.hex(), parent.hex() if has_parent else "",
                    slim.name.decode("utf-8", "replace")))
    return out


def _skipped(span_bytes: bytes, traces: set[bytes], wanted: set[bytes]) -> bool:
    """Whether a span is known from its leading or last bytes alone not to matter: of
    another trace, or with a parent and no GenAI span of the batch below it. ``False``
    when its bytes have neither usual layout (it is parsed)."""
    if len(span_bytes) < _TAIL.size:
        return False
    if span_bytes[:2] == _TRACE_ID_HEAD:
        trace_id, span_tag, span_id, parent_tag = _HEAD.unpack_from(span_bytes)
    elif span_bytes[-18:-16] == _TRACE_ID_HEAD:
        parent_tag, _parent, span_tag, span_id, _trace_tag, trace_id = _TAIL.unpack_from(span_bytes, len(span_bytes)
                                                                                          - _TAIL.size)
    else:
        return False
    if trace_id not in traces:
        return True
    return span_tag == _SPAN_ID_TAG and parent_tag == _PARENT_TAG and span_id not in wanted


def _trace_id(span_bytes: bytes) -> bytes:
    """A serialized span's trace id: from its first bytes (field order), its last (the
    Collector's order), else parsed."""
    if span_bytes[:2] == _TRACE_ID_HEAD:
        return span_bytes[2:18]
    if span_bytes[-18:-16] == _TRACE_ID_HEAD:
        return span_bytes[-16:]
    return _trace_id_of(span_bytes)


def _trace_id_of(span_bytes: bytes) -> bytes:
    """A serialized span's trace id, parsed (when it is not laid out as usual)."""
    try:
        return bytes(SlimSpan.FromString(span_bytes).trace_id)
    except DecodeError:
        return b""
