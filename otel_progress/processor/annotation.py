"""Putting detections on spans: in place on an open span, or on an annotated copy of an
ended one.

An ended SDK span is frozen, so on every released SDK the tool span's annotation reaches
the exporter as a copy (:class:`AnnotatedSpan`) handed to the wrapped processors instead
of the span. The copy reads the original span's attributes, events and status through
its public API each time it is read and adds the detections to them: a processor that
transforms the original *after* this one (OpenInference's span processor replaces the
attributes in its ``on_end``) is reflected in what the exporter reads, and one that ran
*before* it already was.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan, Span
from opentelemetry.trace import Status

from ..model import Detection

__all__ = ["AnnotatedSpan", "annotate_live", "annotated_copy", "is_event_of"]


class AnnotatedSpan(ReadableSpan):
    """An ended span with progress attributes and events added.

    Everything but the added attributes and events is the original's, read when it is
    read (``attributes``, ``events``, ``status`` and the dropped counts follow later
    changes to the original); the added attributes win over the original's."""

    def __init__(self, source: ReadableSpan, attributes: Mapping[str, Any], events: Sequence[Event]) -> None:
        self._source = source
        self._added_attributes = dict(attributes)
        self._added_events = tuple(events)
        super().__init__(
            name=source.name,
            context=source.context,
            parent=source.parent,
            resource=source.resource,
            links=source.links,
            kind=source.kind,
            instrumentation_info=getattr(source, "_instrumentation_info", None),  # (deprecated field; None when absent)
            start_time=source.start_time,
            end_time=source.end_time,
            instrumentation_scope=source.instrumentation_scope,
        )

    # ReadableSpan's own methods (``to_json``, the dropped counts) read these fields:
    # they are views of the original too. Assignments (ReadableSpan.__init__) are ignored.
    @property
    def _attributes(self) -> dict[str, Any]:  # type: ignore[override]
        merged = dict(self._source.attributes or {})
        merged.update(self._added_attributes)
        return merged

    @_attributes.setter
    def _attributes(self, value: Any) -> None:
        pass

    @property
    def _events(self) -> tuple[Event, ...]:  # type: ignore[override]
        return tuple(self._source.events) + self._added_events

    @_events.setter
    def _events(self, value: Any) -> None:
        pass

    @property
    def _status(self) -> Status:  # type: ignore[override]
        return self._source.status

    @_status.setter
    def _status(self, value: Any) -> None:
        pass

    @property
    def attributes(self) -> Mapping[str, Any]:  # type: ignore[override]
        return MappingProxyType(self._attributes)

    @property
    def events(self) -> tuple[Event, ...]:  # type: ignore[override]
        return self._events

    @property
    def status(self) -> Status:
        return self._source.status

    @property
    def dropped_attributes(self) -> int:
        return self._source.dropped_attributes

    @property
    def dropped_events(self) -> int:
        return self._source.dropped_events

    @property
    def dropped_links(self) -> int:
        return self._source.dropped_links

    @property
    def source(self) -> ReadableSpan:
        """The span this one annotates."""
        return self._source


def annotated_copy(span: ReadableSpan, detections: Sequence[Detection],
                   late: Sequence[tuple[Detection, int | None]] = ()) -> ReadableSpan:
    """The ended span with the detections' events (at the span's end) and span attributes
    added. ``late``: detections that were meant for the span while it was open (with
    their times), added first unless the span already has their event."""
    if isinstance(span, AnnotatedSpan):  # annotated twice: one copy of the original
        attributes = dict(span._added_attributes)
        events = list(span._added_events)
        span = span.source
    else:
        attributes, events = {}, []
    existing = span.events
    for det, when in late:
        attributes.update(det.span_attributes())
        if not any(is_event_of(e, det) for e in existing):
            events.append(Event(det.event, det.event_attributes(), timestamp=when))
    when = span.end_time
    for det in detections:
        attributes.update(det.span_attributes())
        events.append(Event(det.event, det.event_attributes(), timestamp=when))
    return AnnotatedSpan(span, attributes, events)


def is_event_of(event: Event, det: Detection) -> bool:
    """Whether ``event`` is the span event of this detection."""
    attrs = event.attributes or {}
    return (event.name == det.event and attrs.get("progress.turn") == det.turn
            and attrs.get("progress.reason") == det.reason.value
            and attrs.get("progress.level") == int(det.level)
            and attrs.get("progress.scope") == det.scope.value and attrs.get("progress.tool") == det.event_attributes()[
                "progress.tool"])


def annotate_live(span: Span, detections: Iterable[Detection], timestamp: int | None = None) -> bool:
    """Add the detections to a span that is still recording; False if it was not."""
    if not span.is_recording():
        return False
    for det in detections:
        span.add_event(det.event, det.event_attributes(), timestamp)
        span.set_attributes(det.span_attributes())
    return True
