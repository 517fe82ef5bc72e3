"""``otel-progress serve`` writes the detections it finds in traces as
``gen_ai.evaluation.result`` log records (``--detection-events``), over real gRPC: inline to
the downstream's LogsService, tap mode to the tap endpoint; ``log`` leaves the spans alone,
``span`` sends no record; a retried batch sends no second record; a downstream without a
logs pipeline is named once and costs the traces nothing."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from otel_progress.model.evaluation import EVENT_NAME
from otel_progress.service.options import ServiceConfigError, from_args
from otel_progress.service.otlp import any_value

from .helpers import (
    Downstream,
    all_spans,
    attrs_of,
    detections_on,
    loop_trace,
    progressing_trace,
    request,
    wait_until,
)

pytestmark = pytest.mark.timeout(120)


def _records(ds: Downstream, count: int, timeout: float = 10.0) -> list[Any]:
    assert wait_until(lambda: len(ds.log_records()) >= count, timeout), ds.log_records()
    time.sleep(0.3)  # nothing more comes
    return ds.log_records()


def _resource_service(ds: Downstream) -> list[str]:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    with ds.lock:
        raws = list(ds.logs_received)
    return [attrs_of(rl.resource.attributes)["service.name"] for raw in raws
            for rl in ExportLogsServiceRequest.FromString(raw).resource_logs]


def test_inline_both_annotates_the_spans_and_sends_one_record_per_detection_in_span_context(
        make_service, downstream, client_for):
    svc = make_service(forward_endpoint=downstream.endpoint)
    client = client_for(svc)
    loop = loop_trace(31, turns=6)
    client.export(request(loop, service="shop-agent"))
    client.export(request(progressing_trace(32), service="shop-agent"))
    assert wait_until(lambda: len(downstream.received) == 2, 5)
    on_spans = [(sid, attrs) for sid, _name, attrs in detections_on(downstream.requests()[0])]
    tool_events = {(sid, a["progress.turn"]) for sid, a in on_spans if sid != "0000000000000001"}
    assert tool_events, "the spans are annotated as before"
    found = svc.metrics.value("progress.service.detections")
    records = _records(downstream, int(found))
    assert len(records) == found == len(tool_events)
    assert svc.metrics.value("progress.service.detections.logged") == found
    by_span = {s.span_id: s for s in loop}
    for record in records:
        assert record.event_name == EVENT_NAME
        assert record.trace_id == loop[0].trace_id
        span = by_span[record.span_id]  # parented to the offending tool span
        assert span.name == "execute_tool search"
        assert record.time_unix_nano == span.end_time_unix_nano
        assert record.severity_number == 13 and record.severity_text == "WARN"
        attrs = attrs_of(record.attributes)
        assert (record.span_id.hex(), attrs["progress.turn"]) in tool_events
        assert attrs["event.name"] == EVENT_NAME
        assert attrs["gen_ai.evaluation.name"] == "progress.no_progress"
        assert attrs["gen_ai.evaluation.score.label"] == attrs["progress.reason"]
        assert attrs["gen_ai.evaluation.score.value"] == float(attrs["progress.level"])
        assert attrs["progress.event"] == "no_progress"
        assert attrs["gen_ai.agent.name"] == "researcher"
        explanation = attrs["gen_ai.evaluation.explanation"]
        assert explanation == any_value(record.body)
        assert explanation.startswith(f"researcher stopped making progress at turn {attrs['progress.turn']}:")
        # never the arguments or results the spans carry
        assert "weather" not in str(attrs) and "weather" not in explanation
    assert set(_resource_service(downstream)) == {"shop-agent"}  # the agent's resource, not the service's


def test_inline_log_forwards_the_spans_as_received_and_span_sends_no_record(make_service, client_for):
    ds_log, ds_span = Downstream().start(), Downstream().start()
    try:
        log_svc = make_service(forward_endpoint=ds_log.endpoint, detection_events="log")
        span_svc = make_service(forward_endpoint=ds_span.endpoint, detection_events="span")
        raw = request(loop_trace(41, turns=6)).SerializeToString()
        client_for(log_svc).export(raw)
        client_for(span_svc).export(raw)
        assert wait_until(lambda: ds_log.received and ds_span.received, 5)
        assert ds_log.received == [raw]  # the batch unchanged: no span event, no attribute
        assert detections_on(downstream_request(ds_span))  # span: annotated as before
        records = _records(ds_log, 1)
        assert records and all(r.event_name == EVENT_NAME for r in records)
        time.sleep(0.5)
        assert ds_span.log_records() == []
        assert span_svc.metrics.value("progress.service.detections.logged") == 0
    finally:
        ds_log.stop()
        ds_span.stop()


def downstream_request(ds: Downstream) -> Any:
    (req,) = ds.requests()
    return req


def test_a_retried_batch_sends_no_second_record(make_service, downstream, client_for):
    svc = make_service(forward_endpoint=downstream.endpoint, batch_cache=0)  # re-read, not replayed
    client = client_for(svc)
    raw = request(loop_trace(51, turns=6)).SerializeToString()
    client.export(raw)
    first = _records(downstream, 1)
    client.export(raw)  # the Collector's retry of the same batch
    assert wait_until(lambda: len(downstream.received) == 2, 5)
    assert detections_on(downstream.requests()[1]), "the retried batch is annotated again"
    time.sleep(0.8)
    assert len(downstream.log_records()) == len(first)


def test_tap_mode_sends_annotation_spans_and_records_to_the_tap_endpoint(make_service, downstream, client_for):
    svc = make_service(mode="tap", tap_endpoint=downstream.endpoint)
    client_for(svc).export(request(loop_trace(61, turns=6), service="tap-agent"))
    found = int(svc.metrics.value("progress.service.detections"))
    records = _records(downstream, found)
    assert len(records) == found > 0
    assert wait_until(lambda: len(all_spans(downstream_request(downstream))) == found if downstream.received
                      else False, 5)
    assert {r.span_id.hex() for r in records} == {
        attrs_of(s.attributes)["progress.annotates.span_id"] for s in all_spans(downstream.requests()[0])}
    assert set(_resource_service(downstream)) == {"tap-agent"}


def test_tap_mode_log_sends_records_only(make_service, downstream, client_for):
    svc = make_service(mode="tap", tap_endpoint=downstream.endpoint, detection_events="log")
    client_for(svc).export(request(loop_trace(62, turns=6)))
    assert _records(downstream, 1)
    time.sleep(0.8)
    assert downstream.received == []  # no annotation span


def test_a_downstream_without_a_logs_pipeline_is_named_once_and_the_traces_still_flow(
        make_service, client_for, caplog):
    ds = Downstream(accept_logs=False).start()
    try:
        svc = make_service(forward_endpoint=ds.endpoint)
        client = client_for(svc)
        with caplog.at_level(logging.WARNING, logger="otel_progress"):
            for t in range(3):
                client.export(request(loop_trace(70 + t, turns=6)))  # acknowledged: no exception
            assert wait_until(lambda: svc.metrics.value("progress.service.tap.dropped",
                                                        {"signal": "logs", "reason": "rejected"}) >= 1, 10)
        assert len(ds.received) == 3
        hints = [r.getMessage() for r in caplog.records if "does not accept log records" in r.getMessage()]
        assert len(hints) == 1 and ds.endpoint in hints[0] and "--detection-events span" in hints[0]
    finally:
        ds.stop()


def test_the_option_is_validated_and_read_from_its_variable() -> None:
    assert from_args(environ={}).detection_events == "both"
    assert from_args(environ={"OTEL_PROGRESS_SERVE_DETECTION_EVENTS": "log"}).detection_events == "log"
    with pytest.raises(ServiceConfigError, match="detection_events"):
        from_args(environ={"OTEL_PROGRESS_SERVE_DETECTION_EVENTS": "logs"})


def test_describe_says_where_detections_go(make_service, downstream) -> None:
    svc = make_service(forward_endpoint=downstream.endpoint)
    assert "gen_ai.evaluation.result log records" in svc.describe()
    assert "span events and attributes only" in make_service(forward_endpoint=downstream.endpoint,
                                                             detection_events="span").describe()


def test_detections_without_a_request_are_sent_as_records(make_service, downstream, monkeypatch) -> None:
    # detections found when a trace closes or is evicted, or a grouped run ends idle, have
    # no request to go in: they reach the logs downstream as records, not only a counter
    from otel_progress import Config, ProgressEngine
    from otel_progress.service.detector import BatchDetector

    offline = BatchDetector(ProgressEngine(Config()))
    found = offline.process(request(loop_trace(41, turns=6)).SerializeToString()).new_detections
    assert found
    svc = make_service(forward_endpoint=downstream.endpoint)
    real = svc.detector.maintain
    pending = [found]
    monkeypatch.setattr(svc.detector, "maintain", lambda now=None: real(now) + (pending.pop() if pending else []))
    records = _records(downstream, len(found))
    assert len(records) == len(found)
    assert {r.span_id.hex() for r in records} == {d.span_id for d in found}
    assert all(attrs_of(r.attributes)["gen_ai.evaluation.score.label"] == "repeat_cycle" for r in records)
    assert _resource_service(downstream) == ["unknown_service"]
    assert svc.metrics.value("progress.service.detections.logged") == len(found)
