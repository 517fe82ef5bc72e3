"""Every span these tests build, as each instrumentation writes it, is also read back from
OTLP/JSON the way ``scan`` reads it (``spans_from_request(lean=True)``): a span a
convention reads must never be read lean (without its attributes and events), and the
lean reading must classify every span as the whole one does (issue 26, item 3)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from otel_progress.conventions.spans import SpanKind, SpanRecord, classify
from otel_progress.otlp.files import encode_attributes, spans_from_request

from . import helpers


def _document(span: SpanRecord) -> dict[str, Any] | None:
    """The record as an OTLP/JSON request; None for a record whose events are not
    ``(name, attributes)`` pairs or whose values have no OTLP/JSON form (an integer of
    thousands of digits): tests of odd in-process values, not of files."""
    events = []
    for event in span.events:
        if not (isinstance(event, tuple) and len(event) == 2 and isinstance(event[1], Mapping)):
            return None
        try:
            events.append({"name": str(event[0]), "attributes": encode_attributes(event[1])})
        except ValueError:
            return None
    try:
        attributes = encode_attributes(span.attributes)
    except ValueError:
        return None
    otlp = {"traceId": span.trace_id, "spanId": span.span_id, "parentSpanId": span.parent_id, "name": span.name,
            "startTimeUnixNano": str(span.start_ns), "endTimeUnixNano": str(span.end_ns),
            "attributes": attributes, "events": events,
            "status": {"code": 2 if span.error else 0}}
    return {"resourceSpans": [{"resource": {"attributes": encode_attributes(span.resource)},
                               "scopeSpans": [{"spans": [otlp]}]}]}


@pytest.fixture(autouse=True)
def _read_back_lean() -> Iterator[None]:
    helpers.BUILT.clear()
    yield
    for span in helpers.BUILT:
        doc = _document(span) if isinstance(span.name, str) else None
        if doc is None:
            continue
        (full,) = spans_from_request(doc)
        (lean,) = spans_from_request(doc, lean=True)
        kind = classify(full)
        assert classify(lean) is kind, span
        if kind is not SpanKind.OTHER:
            assert lean == full, f"a {kind.value} span read lean: {span}"
    helpers.BUILT.clear()
