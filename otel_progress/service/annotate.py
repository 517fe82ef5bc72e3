"""Writing detections into OTLP: events and attributes on the offending span (inline
mode), and annotation spans (tap mode, and detections whose span is not in the batch).

On a span, a detection adds what the in-process processor adds: an event named
``no_progress`` or ``livelock`` with :meth:`Detection.event_attributes`, and the span
attributes of :meth:`Detection.span_attributes` (``progress.detected``,
``progress.reason``, ``progress.level``).

An annotation span lives in the same trace, is parented to the offending span's parent
and linked to the offending span. Its name is the event name; it carries the same event
and span attributes plus the nudge and handoff texts. Its span id is derived from the
detection, so sending it twice (a retry) gives the same span.

A request is annotated in its bytes: only the spans that get an annotation are decoded
and encoded again, and spliced into the request (:mod:`.wire`); every other span,
resource and scope stays the bytes it came in, in the sender's field order (a span the
protobuf runtime could not decode is never touched).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from blake3 import blake3
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from ..model import Detection
from ..model.limits import MAX_METRIC_CHARS, clip_chars
from ..model.version import __version__
from .detector import Placement
from .otlp import ExportTraceServiceRequest, SlimRequest, key_values, to_any_value
from .wire import WireError, splice_request

__all__ = [
    "MAX_TEXT_CHARS", "MAX_VALUE_CHARS", "SCOPE_NAME", "annotate_span", "annotated_request", "annotation_span",
    "annotation_span_id", "tap_items", "tap_request",
]

SCOPE_NAME = "otel-progress.service"

#: Characters kept of a free-text annotation value (tool names, ``a+b`` batches, poll
#: tools) and of the nudge and handoff texts of an annotation span: an annotation adds
#: a bounded number of bytes to a batch whatever the agent's names.
MAX_VALUE_CHARS = MAX_METRIC_CHARS  # (256, as the metric values: otel_progress.model.limits)
MAX_TEXT_CHARS = 2048


def _bounded(attrs: Mapping[str, Any], limit: int = MAX_VALUE_CHARS) -> dict[str, Any]:
    """The attributes with every string cut to ``limit`` characters (a cut one ends in ``…``;
    :func:`otel_progress.model.limits.clip_chars`)."""
    return {key: clip_chars(value, limit) if isinstance(value, str) else value for key, value in attrs.items()}


def annotation_span_id(det: Detection, annotates: str = "") -> bytes:
    """A stable 8-byte span id for the annotation span of a detection (``annotates``: the
    span it annotates when that is not the detection's own, its run's agent span)."""
    key = f"{det.trace_id}|{det.span_id}|{det.reason.value}|{det.turn}|{int(det.level)}".encode()
    if annotates:
        key += f"|{annotates}".encode()
    raw = blake3(key).digest(length=8)
    return raw if any(raw) else b"\x00" * 7 + b"\x01"


def _already_has(span: trace_pb2.Span, det: Detection) -> bool:
    for ev in span.events:
        if ev.name != det.event:
            continue
        attrs = {kv.key: kv.value for kv in ev.attributes}
        reason = attrs.get("progress.reason")
        turn = attrs.get("progress.turn")
        level = attrs.get("progress.level")
        if (reason is not None and reason.string_value == det.reason.value
                and turn is not None and turn.int_value == det.turn
                and (level is None or level.int_value == int(det.level))):
            return True
    return False


def annotate_span(span: trace_pb2.Span, det: Detection) -> bool:
    """Add the detection's event and attributes to a protobuf span (idempotent: a span
    that already carries the same event, its reason, turn and level, is left alone; a run's
    levels may share a turn, as a model-side loop's do when no tool step is between them).
    Returns whether it changed."""
    if _already_has(span, det):
        return False
    event = span.events.add()
    event.time_unix_nano = span.end_time_unix_nano or span.start_time_unix_nano
    event.name = det.event
    event.attributes.extend(key_values(_bounded(det.event_attributes())))
    wanted = _bounded(det.span_attributes())
    kept = [kv for kv in span.attributes if kv.key not in wanted]
    del span.attributes[:]
    span.attributes.extend(kept)
    span.attributes.extend(key_values(wanted))
    return True


def annotation_span(det: Detection, parent_id: str, start_ns: int, end_ns: int,
                    on_agent: bool = False) -> trace_pb2.Span:
    """The annotation span of a detection (see the module docstring); ``on_agent``: it
    annotates the run's agent span ``parent_id`` (exported before the detection was found)."""
    annotates = parent_id if on_agent else det.span_id
    span = trace_pb2.Span(
        trace_id=bytes.fromhex(det.trace_id),
        span_id=annotation_span_id(det, parent_id if on_agent else ""),
        parent_span_id=bytes.fromhex(parent_id) if parent_id else b"",
        name=det.event,
        kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=max(end_ns, start_ns),
    )
    attrs = dict(det.event_attributes())
    attrs.update(det.span_attributes())
    attrs["progress.annotates.span_id"] = annotates
    if det.agent:
        attrs["gen_ai.agent.name"] = det.agent
    attrs = _bounded(attrs)
    attrs.update(_bounded({"progress.nudge": det.nudge, "progress.handoff": det.handoff}, MAX_TEXT_CHARS))
    span.attributes.extend(key_values(attrs))
    event = span.events.add(time_unix_nano=start_ns, name=det.event)
    event.attributes.extend(key_values(_bounded(det.event_attributes())))
    link = span.links.add(trace_id=bytes.fromhex(det.trace_id), span_id=bytes.fromhex(det.span_id))
    link.attributes.append(common_pb2.KeyValue(key="progress.link", value=to_any_value("offending_span")))
    return span


def _scope() -> common_pb2.InstrumentationScope:
    return common_pb2.InstrumentationScope(name=SCOPE_NAME, version=__version__)


def annotated_request(raw: bytes, placements: Sequence[Placement]) -> tuple[bytes, int]:
    """The request with every placement applied; returns the new bytes and how many
    detections were written. Detached placements become annotation spans in a scope of
    their own under the resource of a span of the same trace. Only the annotated spans
    are decoded and encoded again, and spliced into the request's bytes
    (:func:`.wire.splice_request`): every other byte is forwarded as it came in, and a
    request none of whose spans changes is returned as it is."""
    written = 0
    by_span: dict[tuple[int, int, int], list[Detection]] = {}
    detached: dict[int, list[trace_pb2.Span]] = {}
    for p in placements:
        if p.loc is not None:
            by_span.setdefault(p.loc, []).append(p.detection)
        else:
            now = time.time_ns()
            detached.setdefault(p.resource_index, []).append(
                annotation_span(p.detection, p.parent_id, now, now, p.on_agent))
            written += 1

    def rewrite(loc: tuple[int, int, int], span_bytes: bytes) -> bytes | None:
        nonlocal written
        span = trace_pb2.Span.FromString(span_bytes)
        changed = False
        for det in by_span[loc]:
            if annotate_span(span, det):
                written += 1
                changed = True
        return span.SerializeToString() if changed else None

    scope = _scope()
    added = {ri: [trace_pb2.ScopeSpans(scope=scope, spans=_unique(spans)).SerializeToString()]
             for ri, spans in detached.items()}
    try:
        return splice_request(raw, by_span.keys(), rewrite, added), written
    except WireError:  # (groups, which OTLP does not use): the whole request encoded again
        return _reserialized(raw, by_span, detached)


def _reserialized(raw: bytes, by_span: Mapping[tuple[int, int, int], list[Detection]],
                  detached: Mapping[int, list[trace_pb2.Span]]) -> tuple[bytes, int]:
    """:func:`annotated_request` through a parsed slim request (serialized again whole)."""
    request = SlimRequest.FromString(raw)
    written = sum(len(spans) for spans in detached.values())
    for (ri, si, j), dets in by_span.items():
        spans = request.resource_spans[ri].scope_spans[si].spans
        span = trace_pb2.Span.FromString(spans[j])
        changed = False
        for det in dets:
            if annotate_span(span, det):
                written += 1
                changed = True
        if changed:
            spans[j] = span.SerializeToString()
    if detached:
        scope = _scope().SerializeToString()
        for ri, annotation_spans in detached.items():
            if ri >= len(request.resource_spans):
                ri = len(request.resource_spans) - 1
            scope_spans = request.resource_spans[ri].scope_spans.add(scope=scope)
            scope_spans.spans.extend(s.SerializeToString() for s in _unique(annotation_spans))
    return request.SerializeToString(), written


def tap_items(raw: bytes, placements: Sequence[Placement], wanted: Iterable[Detection]
              ) -> list[tuple[resource_pb2.Resource, trace_pb2.Span]]:
    """Tap mode: the annotation span of each placement of a detection in ``wanted`` (not
    repeated on its run's agent span), with the resource of its span; timed at the end of
    the offending span when it is in the request (else now). Only the resources and spans
    the placements point at are decoded; a part that cannot be decoded gives a resource
    named ``unknown_service``, or the time now."""
    new = {id(d) for d in wanted}
    try:
        request: Any = SlimRequest.FromString(raw)
    except Exception:
        request = None
    fallback = resource_pb2.Resource(attributes=key_values({"service.name": "unknown_service"}))
    resources: dict[int, resource_pb2.Resource] = {}
    out = []
    for p in placements:
        if p.on_agent or id(p.detection) not in new:
            continue
        resource = fallback
        start = end = time.time_ns()
        if request is not None and p.resource_index < len(request.resource_spans):
            resource = resources.get(p.resource_index) or fallback
            if p.resource_index not in resources:
                try:
                    resource = resources[p.resource_index] = resource_pb2.Resource.FromString(
                        request.resource_spans[p.resource_index].resource)
                except Exception:  # kept as the fallback
                    resources[p.resource_index] = fallback
            if p.loc is not None:
                ri, si, j = p.loc
                try:
                    span = trace_pb2.Span.FromString(request.resource_spans[ri].scope_spans[si].spans[j])
                    start = end = span.end_time_unix_nano or span.start_time_unix_nano or start
                except Exception:  # the time now
                    pass
        out.append((resource, annotation_span(p.detection, p.parent_id, start, end)))
    return out


def _unique(spans: Iterable[trace_pb2.Span]) -> list[trace_pb2.Span]:
    seen: set[bytes] = set()
    out = []
    for s in spans:
        if s.span_id not in seen:
            seen.add(s.span_id)
            out.append(s)
    return out


def tap_request(items: Sequence[tuple[resource_pb2.Resource, trace_pb2.Span]]) -> ExportTraceServiceRequest:
    """One request of annotation spans, grouped by resource."""
    request = ExportTraceServiceRequest()
    by_resource: dict[bytes, trace_pb2.ResourceSpans] = {}
    for resource, span in items:
        key = resource.SerializeToString(deterministic=True)
        rs = by_resource.get(key)
        if rs is None:
            rs = request.resource_spans.add(resource=resource)
            rs.scope_spans.add(scope=_scope())
            by_resource[key] = rs
        rs.scope_spans[0].spans.append(span)
    return request
