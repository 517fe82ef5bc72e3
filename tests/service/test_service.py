"""`otel-progress serve` over real gRPC on loopback: annotation, forwarding, failure
semantics, idempotence, ordering, bounded state, limits."""

from __future__ import annotations

import gzip
import threading
import time

import grpc
import pytest

from otel_progress.service.otlp import ExportTraceServiceRequest

from .helpers import (
    agent_span,
    all_spans,
    attrs_of,
    chat_span,
    detections_on,
    http_get,
    http_span,
    loop_trace,
    progressing_trace,
    prom_value,
    request,
    retry_delay,
    span,
    tool_span,
    wait_until,
)

pytestmark = pytest.mark.timeout(120)


def test_loop_is_annotated_on_the_repeating_tool_span(make_service, downstream, client_for):
    svc = make_service(forward_endpoint=downstream.endpoint)
    client = client_for(svc)
    client.export(request(loop_trace(1, turns=4)))
    (got,) = downstream.requests()
    found = detections_on(got)
    # turn 2 repeats turn 1 (level 1, nudge), turn 4 repeats again (level 2, restart)
    # on the tool spans, and (as the in-process processor does) on the run's agent span
    assert sorted((s, ev, a["progress.reason"], a["progress.turn"], a["progress.level"]) for s, ev, a in found) == [
        ("0000000000000001", "no_progress", "repeat_cycle", 2, 1),
        ("0000000000000001", "no_progress", "repeat_cycle", 4, 2),
        ("00000000000000ca", "no_progress", "repeat_cycle", 2, 1),
        ("00000000000000cc", "no_progress", "repeat_cycle", 4, 2),
    ]
    by_id = {s.span_id.hex(): s for s in all_spans(got)}
    flagged = attrs_of(by_id["00000000000000ca"].attributes)
    assert flagged["progress.detected"] is True
    assert flagged["progress.reason"] == "repeat_cycle"
    assert flagged["progress.level"] == 1
    # every other span is untouched, and nothing was added or lost
    assert len(by_id) == 9
    assert "progress.detected" not in attrs_of(by_id["00000000000000c9"].attributes)
    assert attrs_of(by_id["0000000000000001"].attributes)["progress.level"] == 2


def test_batch_without_annotation_is_forwarded_byte_for_byte(make_service, downstream, client_for):
    svc = make_service(forward_endpoint=downstream.endpoint)
    client = client_for(svc)
    reqs = [request(progressing_trace(2, turns=5)), request([http_span(3, 5, None, 1.0)])]
    for r in reqs:
        client.export(r)
    assert downstream.received == [r.SerializeToString() for r in reqs]
    metrics = http_get(f"http://127.0.0.1:{svc.health_port}/metrics")[1]
    assert prom_value(metrics, "progress_service_spans_received_total") == 12
    assert prom_value(metrics, "progress_service_batches_annotated_total") == 0


def test_partial_success_of_the_downstream_is_passed_back(make_service, downstream, client_for):
    downstream.partial = 3
    svc = make_service(forward_endpoint=downstream.endpoint)
    resp = client_for(svc).export(request(progressing_trace(4)))
    assert resp.partial_success.rejected_spans == 3


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                                  grpc.StatusCode.ABORTED, grpc.StatusCode.CANCELLED,
                                  grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.DATA_LOSS])
def test_retryable_downstream_failure_answers_unavailable_with_retry_info(make_service, downstream, client_for,
                                                                          code):
    downstream.fail_codes = [code]
    svc = make_service(forward_endpoint=downstream.endpoint, retry_after=1.5)
    status, details, trailers = client_for(svc).export_call(request(progressing_trace(5)))
    assert status is grpc.StatusCode.UNAVAILABLE
    assert code.name in details and "retry" in details
    assert retry_delay(trailers) == pytest.approx(1.5)
    assert downstream.received == []  # it failed: nothing acknowledged downstream either
    assert svc.metrics.value("progress.service.forward.failures", {"code": code.name.lower(), "outcome": "retry"}) == 1


@pytest.mark.parametrize("code", [grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.UNIMPLEMENTED,
                                  grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.FAILED_PRECONDITION,
                                  grpc.StatusCode.INVALID_ARGUMENT])
def test_permanent_downstream_failure_is_passed_on_reported_counted_and_not_retried(
        make_service, downstream, client_for, code, caplog):
    """The Collector's OTLP exporter retries none of these codes: the batch cannot be
    delivered by sending it again, so the service answers the same permanent code (no
    RetryInfo) instead of UNAVAILABLE, which the sender would retry forever."""
    downstream.fail_codes = [code]
    svc = make_service(forward_endpoint=downstream.endpoint)
    with caplog.at_level("ERROR", logger="otel_progress.service"):
        status, details, trailers = client_for(svc).export_call(request(progressing_trace(8)))
    assert status is code
    assert "rejected the data permanently" in details and code.name in details
    assert retry_delay(trailers) is None
    assert downstream.calls == 1  # sent once, not again
    assert svc.metrics.value("progress.service.forward.failures", {"code": code.name.lower(),
                                                                   "outcome": "permanent"}) == 1
    assert svc.metrics.value("progress.service.forward.dropped") == 13
    assert any("rejected a batch of 13 spans permanently" in r.getMessage() for r in caplog.records)
    assert svc.ready()  # the downstream answered: it is reachable


def test_downstream_down_answers_unavailable(make_service, client_for):
    from .helpers import free_port

    svc = make_service(forward_endpoint=f"127.0.0.1:{free_port()}", forward_timeout=1.0)
    t0 = time.monotonic()
    status, _details, trailers = client_for(svc).export_call(request(progressing_trace(6)), timeout=5.0)
    assert status is grpc.StatusCode.UNAVAILABLE
    assert retry_delay(trailers) is not None
    assert time.monotonic() - t0 < 4.5  # inside the Collector's 5 s exporter timeout


def test_slow_downstream_answers_before_the_callers_deadline(make_service, downstream, client_for):
    downstream.delay = 3.0
    svc = make_service(forward_endpoint=downstream.endpoint, forward_timeout=4.0)
    t0 = time.monotonic()
    status, _d, _t = client_for(svc).export_call(request(progressing_trace(7)), timeout=1.5)
    # the service shortens its forward to the caller's remaining time; the caller sees a
    # retryable code (its own DEADLINE_EXCEEDED or our UNAVAILABLE), never UNKNOWN
    assert status in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert time.monotonic() - t0 < 2.5


def test_malformed_request_is_invalid_argument_with_a_clear_message(make_service, downstream, client_for):
    svc = make_service(forward_endpoint=downstream.endpoint)
    status, details, _ = client_for(svc).export_call(b"\x0a\xff\xff\xff\xff\x0f garbage")
    assert status is grpc.StatusCode.INVALID_ARGUMENT
    assert "not an OTLP ExportTraceServiceRequest" in details
    assert downstream.received == []


def test_empty_request_succeeds(make_service, downstream, client_for):
    svc = make_service(forward_endpoint=downstream.endpoint)
    client_for(svc).export(ExportTraceServiceRequest())
    assert downstream.received == [b""]


def test_unreadable_span_is_counted_and_forwarded_untouched(make_service, downstream, client_for):
    svc = make_service(forward_endpoint=downstream.endpoint)
    bad = tool_span(9, 201, 1, 1)
    bad.trace_id = b"\x01\x02\x03"  # 3 bytes: not a trace id
    bad2 = tool_span(9, 202, 1, 2)
    bad2.span_id = b""
    req = request([bad, bad2, *loop_trace(10, turns=2)])
    client_for(svc).export(req)
    (got,) = downstream.requests()
    spans = all_spans(got)
    assert spans[0] == bad and spans[1] == bad2
    assert len(spans) == len(all_spans(req))
    assert {s for s, _, _ in detections_on(got)} == {"00000000000000ca", "0000000000000001"}
    metrics = http_get(f"http://127.0.0.1:{svc.health_port}/metrics")[1]
    assert prom_value(metrics, "progress_service_spans_unreadable_total") == 2


def test_retried_batch_gives_no_duplicate_detection_and_the_same_annotation(make_service, downstream, client_for):
    downstream.fail_codes = [grpc.StatusCode.UNAVAILABLE]
    svc = make_service(forward_endpoint=downstream.endpoint)
    client = client_for(svc)
    req = request(loop_trace(11, turns=4))
    status, _, _ = client.export_call(req)
    assert status is grpc.StatusCode.UNAVAILABLE  # not acknowledged: the Collector retries
    client.export(req)  # the exact bytes again: answered from the digest cache
    client.export(req)  # and once more (a duplicate delivery)
    got = downstream.requests()
    assert len(got) == 2
    assert detections_on(got[0]) == detections_on(got[1])
    assert len(detections_on(got[0])) == 4  # two tool spans, and both on the agent span
    metrics = http_get(f"http://127.0.0.1:{svc.health_port}/metrics")[1]
    assert prom_value(metrics, "progress_service_detections_total") == 2
    assert prom_value(metrics, "progress_service_batches_replayed_total") == 2


def test_rebatched_redelivery_is_deduplicated_per_span(make_service, downstream, client_for):
    """The load balancer may re-split a retried batch: the spans come again in other
    batches. They are re-annotated as the first time and never count as repeats."""
    svc = make_service(forward_endpoint=downstream.endpoint, batch_cache=0)
    client = client_for(svc)
    spans = progressing_trace(12, turns=8)
    client.export(request(spans[:10]))
    client.export(request(spans[4:12]))  # overlaps: spans 4..9 are redelivered
    client.export(request(spans))  # everything again
    for got in downstream.requests():
        assert detections_on(got) == []
    loop = loop_trace(13, turns=4)
    client.export(request(loop[:4]))  # turns 1-2: detection on turn 2
    client.export(request(loop))  # everything again, in one batch
    got = downstream.requests()
    first, again = detections_on(got[-2]), detections_on(got[-1])
    assert [(s, a["progress.turn"]) for s, _, a in first] == [("00000000000000ca", 2)]
    # the redelivered turn-2 span carries the same annotation; turns 3-4 are new
    assert [(s, a["progress.turn"]) for s, _, a in again] == [
        ("00000000000000ca", 2), ("00000000000000cc", 4), ("0000000000000001", 2), ("0000000000000001", 4)]
    metrics = http_get(f"http://127.0.0.1:{svc.health_port}/metrics")[1]
    assert prom_value(metrics, "progress_service_detections_total") == 2
    assert prom_value(metrics, "progress_service_spans_duplicate_total") == 6 + 12 + 4


@pytest.mark.parametrize("merge_window", [10.0, 0.0])
def test_spans_out_of_order_are_ordered_within_a_batch_and_late_ones_merged(
        make_service, downstream, client_for, merge_window):
    svc = make_service(forward_endpoint=downstream.endpoint, merge_window=merge_window)
    client = client_for(svc)
    loop = loop_trace(14, turns=6)
    tools = [s for s in loop if s.name.startswith("execute_tool")]
    # one batch in reverse order: sorted by start time before the engine sees them
    client.export(request(list(reversed(tools[:4]))))
    got = downstream.requests()[-1]
    assert sorted((s, a["progress.turn"]) for s, _, a in detections_on(got)) == [
        ("00000000000000ca", 2), ("00000000000000cc", 4)]
    # A tool call that started before the run's latest step arrives later: within the merge
    # window the trace is analysed again whole (the detections already reported are not
    # reported again); with no window it is folded into the run as it comes, counted late.
    late = tool_span(14, 250, 1, 0, args={"q": "something else"})
    client.export(request([late]))
    metrics = http_get(f"http://127.0.0.1:{svc.health_port}/metrics")[1]
    merged = merge_window > 0
    assert prom_value(metrics, "progress_service_traces_merged_total") == (1 if merged else 0)
    assert prom_value(metrics, "progress_service_spans_late_total") == (0 if merged else 1)
    assert prom_value(metrics, "progress_service_detections_total") == 2


def test_gzip_and_requests_larger_than_4_mib(make_service, downstream, client_for):
    svc = make_service(forward_endpoint=downstream.endpoint)
    client = client_for(svc)
    big = "x" * 2000
    spans = [span(15, 1000 + i, 1, "GET /big", i * 0.01, i * 0.01 + 0.005, {"payload": big + str(i)})
             for i in range(3000)]
    spans.append(span(15, 1, None, "root", 0, 40))
    req = request(spans)
    raw = req.SerializeToString()
    assert len(raw) > 5 * 1024 * 1024
    client.export(req, timeout=20, compression=grpc.Compression.Gzip)
    assert downstream.received == [raw]
    assert len(gzip.compress(raw)) < len(raw)


def test_at_least_ten_concurrent_requests(make_service, downstream, client_for):
    downstream.delay = 0.5
    svc = make_service(forward_endpoint=downstream.endpoint)
    client = client_for(svc)
    results: list[grpc.StatusCode] = []
    lock = threading.Lock()

    def send(i: int) -> None:
        code, _, _ = client.export_call(request(progressing_trace(100 + i, turns=2)), timeout=5)
        with lock:
            results.append(code)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(12)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    elapsed = time.monotonic() - t0
    assert results == [grpc.StatusCode.OK] * 12
    assert downstream.max_active >= 10
    assert elapsed < 3.0  # 12 x 0.5 s serially would be 6 s


def test_overload_answers_unavailable_with_retry_info_never_resource_exhausted(
        make_service, downstream, client_for):
    downstream.delay = 1.0
    svc = make_service(forward_endpoint=downstream.endpoint, max_inflight=2, workers=8)
    client = client_for(svc)
    out: list[tuple[grpc.StatusCode, float | None]] = []
    lock = threading.Lock()

    def send(i: int) -> None:
        code, _, trailers = client.export_call(request(progressing_trace(200 + i, turns=1)), timeout=5)
        with lock:
            out.append((code, retry_delay(trailers)))

    threads = [threading.Thread(target=send, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    codes = [c for c, _ in out]
    assert codes.count(grpc.StatusCode.OK) >= 2
    assert grpc.StatusCode.UNAVAILABLE in codes
    assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE}
    assert all(d == pytest.approx(1.0) for c, d in out if c is grpc.StatusCode.UNAVAILABLE)


def test_state_is_bounded_and_self_metrics_report_it(make_service, downstream, client_for):
    svc = make_service(forward_endpoint=downstream.endpoint, max_traces=3, trace_ttl=60, close_delay=0)
    client = client_for(svc)
    for t in range(5):  # 5 unfinished traces (no root span) into a table of 3
        client.export(request([tool_span(300 + t, 201, 1, 1)]))
    metrics = http_get(f"http://127.0.0.1:{svc.health_port}/metrics")[1]
    assert prom_value(metrics, "progress_service_traces_evicted_early_total") == 2
    assert prom_value(metrics, "progress_service_state_traces") == 3
    # a GenAI span of an evicted trace is late: folded into a fresh state and counted
    client.export(request([tool_span(300, 202, 1, 2)]))
    metrics = http_get(f"http://127.0.0.1:{svc.health_port}/metrics")[1]
    assert prom_value(metrics, "progress_service_spans_late_total") == 1
    # idle TTL and the close after the root span
    svc.detector.maintain(time.monotonic() + 61)
    assert svc.detector.trace_count == 0
    client.export(request(loop_trace(400, turns=2)))  # has its root span
    svc.detector.maintain(time.monotonic() + 0.01)
    assert svc.detector.trace_count == 0
    metrics = http_get(f"http://127.0.0.1:{svc.health_port}/metrics")[1]
    assert prom_value(metrics, "progress_service_traces_expired_total") == 3
    assert prom_value(metrics, "progress_service_traces_completed_total") == 1
    assert svc.engine.active_runs == 0


def test_runs_keyed_by_agent_name_stay_apart(make_service, downstream, client_for):
    """Two agents in one trace whose tool spans carry gen_ai.agent.name: each run is
    judged on its own calls (interleaved calls do not break each other's repeats)."""
    svc = make_service(forward_endpoint=downstream.endpoint)
    spans = []
    for t in range(1, 5):
        spans.append(tool_span(500, 200 + t, 1, t, args={"q": "same"}, agent="a"))
        spans.append(tool_span(500, 300 + t, 2, t, args={"q": f"new {t}"}, result={"r": t}, agent="b"))
    spans[1].start_time_unix_nano += 1_000  # not parallel with a's call
    client_for(svc).export(request(spans))
    found = detections_on(downstream.requests()[0])
    assert {s for s, _, _ in found} == {"00000000000000ca", "00000000000000cc"}


def test_model_spans_separate_steps_and_add_tokens(make_service, downstream, client_for):
    svc = make_service(forward_endpoint=downstream.endpoint)
    spans = [chat_span(600, 100 + t, 1, t, tokens=1000) for t in range(1, 5)]
    spans += [tool_span(600, 200 + t, 1, t) for t in range(1, 5)]
    spans.append(agent_span(600, 1, None, 4))
    client_for(svc).export(request(spans))
    assert svc.engine.stats.steps == 4


def test_health_ready_and_graceful_drain(make_service, downstream, client_for):
    downstream.delay = 1.0
    svc = make_service(forward_endpoint=downstream.endpoint, drain_timeout=5)
    base = f"http://127.0.0.1:{svc.health_port}"
    assert http_get(base + "/healthz") == (200, "ok\n")
    assert http_get(base + "/readyz") == (200, "ready\n")
    assert http_get(base + "/nope")[0] == 404
    client = client_for(svc)
    result: list[grpc.StatusCode] = []
    t = threading.Thread(target=lambda: result.append(client.export_call(request(progressing_trace(700)))[0]))
    t.start()
    assert wait_until(lambda: downstream.active == 1, 5)
    stopper = threading.Thread(target=svc.stop)
    stopper.start()
    assert wait_until(lambda: not svc.ready(), 2)
    t.join(5)
    stopper.join(10)
    assert result == [grpc.StatusCode.OK]  # the request in flight finished
    assert len(downstream.received) == 1
    # after the drain, new requests are refused (retryable), never UNKNOWN
    code, _, _ = client.export_call(request(progressing_trace(701)), timeout=2)
    assert code is grpc.StatusCode.UNAVAILABLE
