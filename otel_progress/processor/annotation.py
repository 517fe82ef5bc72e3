"""Putting detections on spans: in place on an open span, or on an annotated copy of an
ended one; :class:`SpanAnnotator` decides which spans get which detections.

An ended SDK span is frozen, so on every released SDK the tool span's annotation reaches
the exporter as a copy (:class:`AnnotatedSpan`) handed to the wrapped processors instead
of the span. The copy reads the original span's attributes, events and status through
its public API each time it is read and adds the detections to them: a processor that
transforms the original *after* this one (OpenInference's span processor replaces the
attributes in its ``on_end``) is reflected in what the exporter reads, and one that ran
*before* it already was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace import Event, ReadableSpan, Span
from opentelemetry.trace import Status

from ..model import Detection
from .sdk import span_fields

if TYPE_CHECKING:
    from ..runs.live import RunTracker

__all__ = ["AnnotatedSpan", "SpanAnnotator", "annotate_live", "annotated_copy", "is_event_of"]

_MAX_LATE = 4096  # agent spans awaiting a late annotation (see SpanAnnotator._annotate_late)


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


class SpanAnnotator:
    """Puts the detections the :class:`~otel_progress.runs.live.RunTracker` delivers on
    the spans, and hands each to ``emit`` (the metrics, log records and hook).

    The tool span where a detection fired gets it in place in ``_on_ending``
    (:meth:`in_place`, where the SDK allows it) or on the annotated copy handed to the
    wrapped processors (:meth:`copy`); the run's agent span (or the trace's local root)
    gets it in place while it is open, else, with background analysis, on its copy.

    Args:
        tools: annotate tool spans.
        agents: annotate the runs' agent (or root) spans.
        wraps: there are wrapped processors (without, there is no copy to annotate).
        background: a worker analyses the spans (after they ended); ``background`` is
            set False when the processor falls back to inline analysis at shutdown.
        emit: called with every detection, after the annotation.
        fail: counts and logs an error.
    """

    def __init__(self, *, tools: bool, agents: bool, wraps: bool, background: bool,
                 emit: Callable[[Detection], None], fail: Callable[[str, BaseException], None]) -> None:
        #: the run tracker (it calls :meth:`deliver`, so it is set once it exists)
        self.runs: RunTracker | None = None
        self.background = background
        self.tools = tools
        self._agents = agents
        self._wraps = wraps
        self._emit = emit
        self._fail = fail
        # Background analysis: detections for agent (or root) spans that had ended before
        # the worker got to them, keyed by span id: added to the copy.
        self._late: dict[int, list[tuple[Detection, int | None]]] = {}
        #: Annotating in place: the tool spans the SDK did not let ``_on_ending`` change,
        #: with their detections (they get a copy in ``on_end``).
        self.pending: dict[int, list[Detection]] = {}

    def deliver(self, dets: list[Detection], trace_id: int, current: str,
                when: int | None) -> list[Detection] | None:
        """Annotate the runs' open spans (events at ``when``, the time of the span that
        brought the detections), count, call the hook; return the detections that belong
        on the span ``current`` (hex id), which is ending."""
        mine: list[Detection] = []
        for det in dets:
            if det.span_id == current:
                mine.append(det)
            if self._agents:
                target, target_id = self.runs.run_span(trace_id, det.run_id)  # type: ignore[union-attr]
                if target_id is not None and format(target_id, "016x") != current:
                    try:
                        # (a span that is gone was dropped by the application, or, in the
                        # background, it ended and only its ended copy is still queued)
                        if target is None or not annotate_live(target, (det,), when) or (
                                self.background and not target.is_recording()):
                            self._annotate_late(target_id, det, when, trace_id)
                    except Exception as exc:
                        self._fail("annotate agent span", exc)
            self._emit(det)
        return mine or None

    def _annotate_late(self, target_id: int, det: Detection, when: int | None, trace_id: int) -> None:
        """Background analysis: the agent (or root) span had ended, or ended while it was
        being annotated, before the worker got to this detection. Its end is still queued
        behind the current item (its run, or the root, is still known), so the copy
        handed to the wrapped processors gets the detection: the exported span is the
        one the inline mode exports. (Without a wrapped processor, it is lost.)"""
        if not (self.background and self._wraps):
            return
        if det.run_id == "" and self.runs.root_id(trace_id) != target_id:  # type: ignore[union-attr]
            return  # the root's end was processed already
        late = self._late
        late.setdefault(target_id, []).append((det, when))
        if len(late) > _MAX_LATE:
            del late[next(iter(late))]

    def copy(self, span: ReadableSpan, sid: int, mine: Sequence[Detection] | None) -> ReadableSpan:
        """What the wrapped processors get for an ended span (span id ``sid``) that brought
        the detections ``mine``: the span, or a copy annotated with them and with the
        detections that were meant for it while it was open."""
        late = self._late.pop(sid, None) if self._late else None
        if not self._wraps or not ((mine and self.tools) or late):
            return span
        return annotated_copy(span, (mine or ()) if self.tools else (), late or ())

    def in_place(self, span: Span, sid: int, mine: list[Detection]) -> None:
        """In ``_on_ending``: annotate the ending tool span itself; if the SDK did not keep
        the change, its copy gets the detections in ``on_end`` (:meth:`pending_copy`)."""
        if not self.tools:
            return
        annotate_live(span, mine, span.end_time)
        if (span.attributes or {}).get("progress.detected") is not True:
            # The SDK did not keep the change after all: fall back to the copy.
            self.pending[sid] = mine

    def pending_copy(self, span: ReadableSpan) -> ReadableSpan:
        """In ``on_end`` after :meth:`in_place`: the span, or its annotated copy if the
        SDK did not let ``_on_ending`` change it."""
        mine = self.pending.pop(span_fields(span)[1], None)
        return annotated_copy(span, mine) if mine else span
