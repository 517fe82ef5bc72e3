"""The processor next to processors that transform spans, and on spans whose private
fields are missing or of another type.

``OpenInferenceSpanProcessor`` (the real one, from ``openinference-instrumentation-pydantic-ai``)
replaces ``span._attributes`` with a plain dict in its ``on_end`` and adds OpenInference
attributes. Registered before the progress processor or after it, in either analysis
mode, nothing fails and what the exporter writes carries both its attributes and the
detection. The exporter here snapshots each span when it exports it, as a real exporter
serialises it then.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_progress import Config, Detection, ProgressSpanProcessor
from otel_progress.demo import ScriptedAgent

from .conftest import docs_loop

oi = pytest.importorskip("openinference.instrumentation.pydantic_ai",
                         reason="openinference-instrumentation-pydantic-ai is in the test extra")


class SnapshotExporter(SpanExporter):
    """Records what an exporter reads of each span at export time."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def export(self, spans: Any) -> SpanExportResult:
        with self._lock:
            for s in spans:
                self.spans.append({
                    "name": s.name, "span_id": format(s.context.span_id, "016x"),
                    "attributes": dict(s.attributes or {}),
                    "events": [(e.name, dict(e.attributes or {})) for e in s.events],
                    "status": s.status.status_code.name,
                    "dropped": (s.dropped_attributes, s.dropped_events, s.dropped_links),
                })
        return SpanExportResult.SUCCESS


def _setup(order: str, analysis: str) -> tuple[TracerProvider, ProgressSpanProcessor, SnapshotExporter,
                                               list[Detection]]:
    exporter = SnapshotExporter()
    detections: list[Detection] = []
    batch = BatchSpanProcessor(exporter, schedule_delay_millis=50)
    # (a hook makes "auto" inline; the background mode is asked for explicitly)
    progress = ProgressSpanProcessor(batch, config=Config(), analysis=analysis, on_detection=detections.append)
    provider = TracerProvider(shutdown_on_exit=False)
    if order == "before":
        provider.add_span_processor(oi.OpenInferenceSpanProcessor())
        provider.add_span_processor(progress)
    else:
        provider.add_span_processor(progress)
        provider.add_span_processor(oi.OpenInferenceSpanProcessor())
    return provider, progress, exporter, detections


@pytest.mark.parametrize("analysis", ["inline", "background"])
@pytest.mark.parametrize("order", ["before", "after"])
def test_openinference_span_processor_in_either_order(order: str, analysis: str) -> None:
    provider, progress, exporter, detections = _setup(order, analysis)
    docs_loop(ScriptedAgent(provider.get_tracer("tests")), turns=6)
    assert progress.force_flush(10_000)
    provider.shutdown()
    assert progress.processor_errors == 0
    assert [(d.reason.value, d.turn) for d in detections] == [("barren", 4)]
    det = detections[0]
    by_id = {s["span_id"]: s for s in exporter.spans}
    assert len(by_id) == len(exporter.spans) == 13  # agent, 6 chats, 6 tools: each exported once
    tool = by_id[det.span_id]
    # the detection ...
    assert tool["attributes"]["progress.detected"] is True
    assert ("no_progress", det.event_attributes()) in tool["events"]
    # ... and what the other processor added, whatever the order
    assert tool["attributes"]["openinference.span.kind"] == "TOOL"
    assert tool["attributes"]["tool.name"] == "search_docs"
    assert tool["status"] == "OK"
    agent = next(s for s in exporter.spans if s["name"].startswith("invoke_agent"))
    assert agent["attributes"]["openinference.span.kind"] == "AGENT"
    assert agent["attributes"]["progress.reason"] == "barren"
    assert all(s["attributes"].get("openinference.span.kind") for s in exporter.spans)


# -- private fields missing or of another type --------------------------------------------


class PublicOnly:
    """A live span seen through the public span API only (no private fields)."""

    def __init__(self, span: Any) -> None:
        self._span = span

    context = property(lambda self: self._span.context)
    parent = property(lambda self: self._span.parent)
    name = property(lambda self: self._span.name)
    attributes = property(lambda self: self._span.attributes)
    start_time = property(lambda self: self._span.start_time)

    def get_span_context(self) -> Any:
        return self._span.get_span_context()

    def is_recording(self) -> bool:
        return self._span.is_recording()

    def add_event(self, *args: Any, **kwargs: Any) -> None:
        self._span.add_event(*args, **kwargs)

    def set_attributes(self, attributes: Any) -> None:
        self._span.set_attributes(attributes)


class OddReadable(ReadableSpan):
    """An ended span whose private fields are of other types (public API intact)."""

    def __init__(self, span: ReadableSpan) -> None:
        super().__init__(name=span.name, context=span.context, parent=span.parent, resource=span.resource,
                         attributes=dict(span.attributes or {}), events=span.events, links=span.links,
                         kind=span.kind, status=span.status, start_time=span.start_time,
                         end_time=span.end_time, instrumentation_scope=span.instrumentation_scope)
        self._public = (span.context, span.parent, span.name, dict(span.attributes or {}))
        self._context = None  # type: ignore[assignment]
        self._parent = 5  # type: ignore[assignment]
        del self._name
        # (self._attributes stays a plain dict, as OpenInference leaves it)

    context = property(lambda self: self._public[0])
    parent = property(lambda self: self._public[1])
    name = property(lambda self: self._public[2])
    attributes = property(lambda self: self._public[3])

    def get_span_context(self) -> Any:
        return self._public[0]


class Mangler(SpanProcessor):
    """Hands the progress processor spans without the SDK's private fields."""

    def __init__(self, inner: SpanProcessor) -> None:
        self.inner = inner
        self.live: dict[int, PublicOnly] = {}  # (the application holds its open spans)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        view = self.live[span.context.span_id] = PublicOnly(span)
        self.inner.on_start(view, parent_context)  # type: ignore[arg-type]

    def on_end(self, span: ReadableSpan) -> None:
        self.live.pop(span.context.span_id, None)
        self.inner.on_end(OddReadable(span))

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _loop(processor_for: Any, analysis: str) -> tuple[list[Detection], list[dict[str, Any]], ProgressSpanProcessor]:
    exporter = SnapshotExporter()
    detections: list[Detection] = []
    progress = ProgressSpanProcessor(BatchSpanProcessor(exporter, schedule_delay_millis=50), config=Config(),
                                     analysis=analysis, on_detection=detections.append)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor_for(progress))
    tracer = provider.get_tracer("tests")
    a = ScriptedAgent(tracer)
    docs_loop(a, turns=6)
    with tracer.start_as_current_span("handle request"):  # calls outside any agent: the root's run
        for i in range(5):
            a.tool("search_docs", {"q": f"q{i}"}, {"results": []})
    assert progress.force_flush(10_000)
    provider.shutdown()
    return detections, exporter.spans, progress


@pytest.mark.parametrize("analysis", ["inline", "background"])
def test_spans_without_the_private_fields_take_the_public_path(analysis: str) -> None:
    want, want_spans, _ = _loop(lambda p: p, analysis)
    got, got_spans, progress = _loop(Mangler, analysis)
    assert progress.processor_errors == 0
    # (the tokens too: a model span the public path left unannotated was once analysed
    # twice, its tokens counted twice)
    assert [(d.reason, d.turn, d.level, d.run_id != "", d.tool, d.tokens) for d in got] == \
        [(d.reason, d.turn, d.level, d.run_id != "", d.tool, d.tokens) for d in want]
    assert len(got) == 2
    annotated = [(s["name"], s["events"]) for s in got_spans if s["events"]]
    assert annotated == [(s["name"], s["events"]) for s in want_spans if s["events"]]
    assert {s["name"] for s in got_spans if s["events"]} == {
        "execute_tool search_docs", "invoke_agent docs-agent", "handle request"}


def test_an_sdk_with_another_span_layout_reads_every_span_publicly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe finds the layout unexpected: the processor still detects, through the
    public API (not just forwards)."""
    import otel_progress.processor.sdk as sdk

    monkeypatch.setattr(sdk, "_PROBE", (False, False))
    detections: list[Detection] = []
    exporter = SnapshotExporter()
    progress = ProgressSpanProcessor(BatchSpanProcessor(exporter, schedule_delay_millis=50), config=Config(),
                                     analysis="inline", on_detection=detections.append)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(progress)
    docs_loop(ScriptedAgent(provider.get_tracer("tests")), turns=6)
    provider.shutdown()
    assert progress.on_start.__name__ == "on_start_public"
    assert [(d.reason.value, d.turn) for d in detections] == [("barren", 4)]
    assert progress.processor_errors == 0
    tool = next(s for s in exporter.spans if s["span_id"] == detections[0].span_id)
    assert tool["attributes"]["progress.detected"] is True


def test_the_annotated_copy_follows_later_changes_of_the_original() -> None:
    """What the copy reads is the original's, as it is when it is read."""
    from opentelemetry.sdk.trace import Event
    from opentelemetry.trace import Status, StatusCode

    from otel_progress.processor.annotation import AnnotatedSpan

    provider = TracerProvider(shutdown_on_exit=False)
    ended: list[ReadableSpan] = []

    class Keep(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            ended.append(span)

    provider.add_span_processor(Keep())
    with trace.get_tracer("t", tracer_provider=provider).start_as_current_span("s", attributes={"a": 1}):
        pass
    original = ended[0]
    copy = AnnotatedSpan(original, {"progress.detected": True}, [Event("no_progress", {"x": 1})])
    original._attributes = {**original.attributes, "b": 2}  # what OpenInference does after us
    original._status = Status(StatusCode.OK)
    assert dict(copy.attributes) == {"a": 1, "b": 2, "progress.detected": True}
    assert copy.status.status_code is StatusCode.OK
    assert [e.name for e in copy.events] == ["no_progress"]
    assert '"progress.detected": true' in copy.to_json() and '"b": 2' in copy.to_json()
    with pytest.raises(TypeError):
        copy.attributes["c"] = 3  # type: ignore[index]
