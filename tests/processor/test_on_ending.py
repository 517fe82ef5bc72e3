"""Annotating in ``_on_ending`` on an SDK where it can still modify the span.

No released SDK has that yet (opentelemetry-python issue #5614, PR #5613): its behaviour
is reproduced here by patching ``Span.end`` and the mutators the way the PR does (the
ending thread may still modify the span while the ``_on_ending`` callbacks run). The
processor must find that out by itself and annotate in place, whatever its position.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from time import time_ns as _time_ns
from typing import Any

import pytest
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import Event, Span

import otel_progress.processor.sdk as processor_module
from otel_progress import Config, ProgressSpanProcessor

from .conftest import docs_loop, make_rig, progress_attrs, progress_events


def _mutable(span: Any) -> bool:
    return span._end_time is None or getattr(span, "_ending_thread", None) == threading.get_ident()


@pytest.fixture
def sdk_with_fix(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def end(self: Any, end_time: int | None = None) -> None:
        with self._lock:
            if self._start_time is None:
                raise RuntimeError("Calling end() on a not started span.")
            if self._end_time is not None:
                return
            self._end_time = end_time if end_time is not None else _time_ns()
            self._ending_thread = threading.get_ident()
        try:
            if self._record_end_metrics:
                self._record_end_metrics()
            self._span_processor._on_ending(self)
        finally:
            self._ending_thread = None
            self._attributes._immutable = True
        self._span_processor.on_end(self._readable_span())

    def set_attribute(self: Any, key: str, value: Any) -> None:
        with self._lock:
            if _mutable(self):
                self._attributes[key] = value

    def set_attributes(self: Any, attributes: Any) -> None:
        with self._lock:
            if _mutable(self):
                for key, value in attributes.items():
                    self._attributes[key] = value

    def add_event(self: Any, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        if _mutable(self):
            attrs = BoundedAttributes(self._limits.max_event_attributes, attributes, immutable=True)
            self._events.append(Event(name, attrs, timestamp))

    monkeypatch.setattr(Span, "end", end)
    monkeypatch.setattr(Span, "set_attribute", set_attribute)
    monkeypatch.setattr(Span, "set_attributes", set_attributes)
    monkeypatch.setattr(Span, "add_event", add_event)
    monkeypatch.setattr(Span, "is_recording", _mutable)
    monkeypatch.setattr(processor_module, "_PROBE", None)
    yield
    processor_module._PROBE = None


def test_released_sdk_is_detected_as_observe_only() -> None:
    processor_module._PROBE = None
    assert processor_module.on_ending_is_mutable() is False
    assert ProgressSpanProcessor(config=Config()).annotates_in_on_ending is False


def test_fixed_sdk_annotates_in_place_even_after_the_exporter(sdk_with_fix: None) -> None:
    assert processor_module.on_ending_is_mutable() is True
    r = make_rig(wrap=False)  # exporter registered first, the processor after it
    assert r.processor.annotates_in_on_ending
    docs_loop(r.agent(), turns=6)
    det = r.detections[0]
    tool = r.by_id()[det.span_id]
    assert progress_attrs(tool) == det.span_attributes()
    assert progress_events(tool) == [("no_progress", det.event_attributes())]
    agent = next(s for s in r.spans() if s.name.startswith("invoke_agent"))
    assert progress_events(agent) == [("no_progress", det.event_attributes())]


def test_fixed_sdk_wrapped_processor_gets_the_span_itself(sdk_with_fix: None) -> None:
    r = make_rig(wrap=True)
    docs_loop(r.agent(), turns=5)
    det = r.detections[0]
    tool = r.by_id()[det.span_id]
    assert progress_events(tool) == [("no_progress", det.event_attributes())]
    assert len([e for e in tool.events if e.name == "no_progress"]) == 1  # not twice


def test_forcing_on_ending_on_a_released_sdk_falls_back_to_the_copy() -> None:
    processor_module._PROBE = None
    r = make_rig(wrap=True, use_on_ending=True)
    docs_loop(r.agent(), turns=5)
    det = r.detections[0]
    assert progress_events(r.by_id()[det.span_id]) == [("no_progress", det.event_attributes())]


def test_fixed_sdk_background_analysis_annotates_copies(sdk_with_fix: None) -> None:
    """The worker gets the span after the SDK froze it: background analysis always
    hands the wrapped processor an annotated copy, with the same content."""
    r = make_rig(wrap=True, analysis="background")
    assert not r.processor.annotates_in_on_ending
    docs_loop(r.agent(), turns=5)
    r.processor.force_flush()
    det = r.detections[0]
    tool = r.by_id()[det.span_id]
    assert progress_attrs(tool) == det.span_attributes()
    assert progress_events(tool) == [("no_progress", det.event_attributes())]
    agent = next(s for s in r.spans() if s.name.startswith("invoke_agent"))
    assert progress_events(agent) == [("no_progress", det.event_attributes())]
    r.provider.shutdown()
