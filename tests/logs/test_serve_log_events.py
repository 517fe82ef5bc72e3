"""``otel-progress serve`` writes the detections it finds in coding agents' log input also as
``gen_ai.evaluation.result`` records (``--detection-events``), over real gRPC with the
golden captures of the real CLIs: ``both`` (the default) annotates the offending record,
adds the ``progress.*`` detection record and the evaluation record; ``span`` the first two;
``log`` only the evaluation record (the agent's records forwarded as received). The record
is the trace path's, in the offending record's span context when it has one (Claude Code's
records do, Codex's do not), in its resource; inline in the forwarded request, in tap mode
in the findings; a retried request gives no second one; a run that ends idle sends its
late detections through the logs queue."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_progress import Config
from otel_progress.model.evaluation import EVENT_NAME
from otel_progress.service.annotate import SCOPE_NAME
from otel_progress.service.otlp import any_value
from otel_progress.service.server import ProgressService
from tests.service.helpers import Client, Downstream, wait_until

from .conftest import GOLDEN, b64_ids, documents
from .test_one_report import _first_time
from .test_serve_logs import LogsSink, _requests, _send, _service

pytestmark = pytest.mark.timeout(120)

CODEX_LOOP = "codex-0.171.0-loop.jsonl"  # 3 repeat_cycle detections; records without span context
CLAUDE_ERRORS = "claude-code-2.1.332-failing-command-details.jsonl"  # 1 error_recurrence; with span context


@pytest.fixture
def sink() -> Iterator[LogsSink]:
    s = LogsSink()
    yield s
    s.server.stop(0)


def _attrs(record: Any) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in record.attributes}


def _placed(requests: list[ExportLogsServiceRequest]) -> list[tuple[dict[str, Any], str, Any]]:
    """Every record received, with its resource's attributes and its scope's name."""
    return [({kv.key: any_value(kv.value) for kv in rl.resource.attributes}, sl.scope.name, r)
            for req in requests for rl in req.resource_logs for sl in rl.scope_logs for r in sl.log_records]


def _received(sink: LogsSink) -> list[tuple[dict[str, Any], str, Any]]:
    with sink.lock:
        return _placed(list(sink.received))


def _kinds(placed: list[tuple[dict[str, Any], str, Any]]) -> tuple[list[Any], list[Any], list[Any]]:
    """(evaluation records, progress.* detection records, records marked progress.detected)."""
    evaluations = [r for _, _, r in placed if r.event_name == EVENT_NAME]
    detections = [r for _, _, r in placed if r.event_name.startswith("progress.")]
    marked = [r for _, _, r in placed if not r.event_name.startswith("progress.") and r.event_name != EVENT_NAME
              and "progress.detected" in _attrs(r)]
    return evaluations, detections, marked


def _check_evaluation(record: Any, reason: str) -> dict[str, Any]:
    a = _attrs(record)
    assert record.severity_text == "WARN" and record.severity_number == 13
    assert a["event.name"] == EVENT_NAME and a["gen_ai.evaluation.name"] == "progress.no_progress"
    assert a["gen_ai.evaluation.score.label"] == a["progress.reason"] == reason
    assert a["gen_ai.evaluation.score.value"] == float(a["progress.level"]) and a["progress.level"] in (1, 2, 3)
    assert record.body.string_value == a["gen_ai.evaluation.explanation"]
    assert f": {reason}" in a["gen_ai.evaluation.explanation"]
    assert a["progress.event"] == "no_progress" and a["progress.scope"] == "agent"
    assert isinstance(a["progress.turn"], int) and a["progress.tool"]
    assert a["progress.annotates.tool_call.id"] and a["progress.run_key"]
    assert "progress.nudge" not in a and "progress.handoff" not in a
    return a


@pytest.mark.parametrize("mode", ["both", "span", "log"])
def test_inline_each_mode_writes_its_records(sink: LogsSink, mode: str) -> None:
    service = _service(forward_endpoint=f"127.0.0.1:{sink.port}", detection_events=mode)
    try:
        requests = _requests(CODEX_LOOP)
        _send(service.port, requests)
        placed = _received(sink)
        evaluations, detections, marked = _kinds(placed)
        sent = _placed(requests)
        assert len(placed) == len(sent) + len(evaluations) + len(detections)
        # (six identical commands: the first re-issue is a re-check; detections at turns 3 and 6)
        assert len(evaluations) == (2 if mode != "span" else 0)
        assert len(detections) == len(marked) == (2 if mode != "log" else 0)
        if mode == "log":  # the agent's records as they came, in their order; only the records added
            assert [r for _, _, r in placed if r.event_name != EVENT_NAME] == [r for _, _, r in sent]
        codex = {json.dumps(resource, sort_keys=True) for resource, _, _ in sent}
        for resource, scope, record in placed:
            if record.event_name != EVENT_NAME:
                continue
            a = _check_evaluation(record, "repeat_cycle")
            assert json.dumps(resource, sort_keys=True) in codex  # the offending record's resource
            assert scope == SCOPE_NAME
            assert record.trace_id == b"" and record.span_id == b""  # Codex's records have no span context
            assert a["conversation.id"] == "01a23128-9b8f-7d63-91ab-f96e27715538"  # the run's id, to find it
            assert record.time_unix_nano > 0
            arguments = [_attrs(r).get("arguments") for _, _, r in sent if r.event_name == "codex.tool_result"]
            assert all(not arg or arg not in record.SerializeToString().decode("utf-8", "replace")
                       for arg in arguments)  # never the arguments
        turns = sorted(_attrs(r)["progress.turn"] for r in evaluations + detections)
        assert turns == ([3, 3, 6, 6] if mode == "both" else [3, 6])
        if mode == "both":  # the two records of one detection name the same tool call
            assert sorted(_attrs(r)["progress.annotates.tool_call.id"] for r in evaluations) == sorted(
                _attrs(r)["progress.annotates.tool_call.id"] for r in detections)
        assert service.metrics.value("progress.service.detections.logged") == len(evaluations)
        assert service.metrics.value("progress.service.detections") == 2
        described = service.describe()
        assert "detections in logs:" in described
        assert ("gen_ai.evaluation.result" in described.split("detections in logs:")[1]) == (mode != "span")
    finally:
        service.stop(grace=0.5)


def test_the_record_is_in_the_offending_records_span_context(sink: LogsSink) -> None:
    """Claude Code's records carry the trace and span ids of its spans: the evaluation record
    is parented to the offending tool record's span, at its time, like the detection record."""
    service = _service(forward_endpoint=f"127.0.0.1:{sink.port}")
    try:
        _send(service.port, _requests(CLAUDE_ERRORS))
        placed = _received(sink)
        evaluations, detections, marked = _kinds(placed)
        assert len(evaluations) == len(detections) == len(marked) == 1
        (evaluation,), (detection,), (offending,) = evaluations, detections, marked
        a = _check_evaluation(evaluation, "error_recurrence")
        assert len(evaluation.trace_id) == 16 and len(evaluation.span_id) == 8
        assert (evaluation.trace_id, evaluation.span_id) == (offending.trace_id, offending.span_id) == (
            detection.trace_id, detection.span_id)
        assert evaluation.time_unix_nano == offending.time_unix_nano
        assert a["session.id"] == _attrs(offending)["session.id"]
        assert a["progress.annotates.tool_call.id"] == _attrs(detection)["progress.annotates.tool_call.id"]
        resources = {json.dumps(res, sort_keys=True) for res, _, r in placed if r is offending or r is evaluation}
        assert len(resources) == 1  # in the offending record's resource
    finally:
        service.stop(grace=0.5)


def test_a_retried_request_gives_one_evaluation_record(sink: LogsSink) -> None:
    """Inline: the first delivery failed (UNAVAILABLE, not acknowledged), so the retry carries
    the records again, and the sink has one of each; the detection is counted once."""
    service = _service(forward_endpoint=f"127.0.0.1:{sink.port}")
    try:
        whole = ExportLogsServiceRequest()
        for request in _requests(CLAUDE_ERRORS):
            whole.MergeFrom(request)
        sink.fail_codes = [grpc.StatusCode.UNAVAILABLE]
        with pytest.raises(grpc.RpcError):
            _send(service.port, [whole])
        _send(service.port, [whole])  # the retry
        evaluations, detections, _marked = _kinds(_received(sink))
        assert len(evaluations) == len(detections) == 1
        assert service.metrics.value("progress.service.detections.logged") == 1
        assert service.metrics.value("progress.service.detections") == 1
    finally:
        service.stop(grace=0.5)


def _tap_records(sink: LogsSink, count: int) -> list[tuple[dict[str, Any], str, Any]]:
    assert wait_until(lambda: len(_received(sink)) >= count, 10), _received(sink)
    time.sleep(0.5)  # nothing more comes
    return _received(sink)


@pytest.mark.parametrize("mode", ["both", "log"])
def test_tap_mode_sends_the_records_in_its_findings(sink: LogsSink, mode: str) -> None:
    service = _service(mode="tap", tap_endpoint=f"127.0.0.1:{sink.port}", detection_events=mode)
    try:
        requests = _requests(CODEX_LOOP)
        _send(service.port, requests)
        placed = _tap_records(sink, 4 if mode == "both" else 2)
        evaluations, detections, marked = _kinds(placed)
        assert len(evaluations) == 2 and len(detections) == (2 if mode == "both" else 0)
        assert len(placed) == len(evaluations) + len(detections) and not marked  # findings only
        for resource, scope, record in placed:
            assert resource["service.name"] == "codex_exec"
            if record.event_name == EVENT_NAME:
                _check_evaluation(record, "repeat_cycle")
                assert scope == SCOPE_NAME
        _send(service.port, requests)  # delivered again: nothing new, no second record
        time.sleep(1.0)
        assert len(_received(sink)) == len(placed)
    finally:
        service.stop(grace=0.5)


def _held_back(service: ProgressService) -> list[ExportLogsServiceRequest]:
    """Gemini CLI's spans are richer than its logs: once one tool span was seen, the logs'
    detection is held back, and reported when the log run ends if the spans never report
    the loop. Sends the first tool span and the logs; returns the logs' requests."""
    traces = documents(GOLDEN / "gemini-cli-0.61.0-loop.traces.jsonl")
    spans = sorted(({"resourceSpans": [{**rs, "scopeSpans": [{**ss, "spans": [span]}]}]}
                    for doc in traces for rs in doc["resourceSpans"] for ss in rs["scopeSpans"]
                    for span in ss["spans"]), key=_first_time)
    tool_span = next(doc for doc in spans if "tool_call" in json.dumps(doc))
    client = Client(f"127.0.0.1:{service.port}")
    try:
        client.export(json_format.ParseDict(b64_ids(tool_span), ExportTraceServiceRequest(),
                                            ignore_unknown_fields=True))
    finally:
        client.close()
    requests = _requests("gemini-cli-0.61.0-loop.jsonl")
    _send(service.port, requests)
    assert service.metrics.value("progress.service.detections") == 0  # held back
    return requests


def _check_detached(service: ProgressService, placed: list[tuple[dict[str, Any], str, Any]],
                    requests: list[ExportLogsServiceRequest]) -> None:
    """One detection, whose records are in the run's resource, without span context."""
    evaluations, detections, _marked = _kinds(placed)
    assert len(evaluations) == len(detections) == 1
    a = _check_evaluation(evaluations[0], _attrs(detections[0])["progress.reason"])
    assert evaluations[0].trace_id == b""  # the offending record came long before: no span context
    assert a["progress.run_key"] == _attrs(detections[0])["progress.run_key"]
    gemini = {json.dumps(res, sort_keys=True) for res, _, r in _placed(requests)}
    added = [(res, scope) for res, scope, r in placed if r.event_name.startswith(("progress.", EVENT_NAME))]
    assert len(added) == 2 and all(json.dumps(res, sort_keys=True) in gemini for res, _ in added)
    assert service.metrics.value("progress.service.detections.detached") == 1
    assert service.metrics.value("progress.service.detections") == 1
    assert service.metrics.value("progress.service.detections.logged") == 1


def test_a_run_that_ends_idle_sends_its_detection_through_the_logs_queue() -> None:
    """The held-back detection of a log run that ends idle (after the run TTL) has no
    request to go in: its records (detection record and evaluation record, in the run's
    resource) go to the forward endpoint through the logs queue."""
    downstream = Downstream().start()
    service = ProgressService(_config(downstream), Config(run_ttl_seconds=1.0)).start()
    try:
        requests = _held_back(service)
        assert wait_until(lambda: any(r.event_name == EVENT_NAME for r in downstream.log_records()), 15)
        time.sleep(0.5)
        with downstream.lock:
            placed = _placed([ExportLogsServiceRequest.FromString(raw) for raw in downstream.logs_received])
        _check_detached(service, placed, requests)
    finally:
        service.stop(grace=1.0)
        downstream.stop()


def test_a_run_that_ends_in_a_request_writes_its_records_in_its_own_resource() -> None:
    """A log run ended by a later request (its session's ``session.end``, sent by another
    program here): its held-back detection goes into that request, in a copy of the run's
    own latest resource (not the request's, not an empty one)."""
    downstream = Downstream().start()
    service = ProgressService(_config(downstream), Config()).start()
    try:
        requests = _held_back(service)
        end = ExportLogsServiceRequest()
        rl = end.resource_logs.add()
        rl.resource.attributes.add(key="service.name").value.string_value = "session-supervisor"
        record = rl.scope_logs.add().log_records.add(event_name="session.end", time_unix_nano=time.time_ns())
        record.attributes.add(key="session.id").value.string_value = "e1fe8c80-4919-468c-9989-7bdc96313b37"
        with downstream.lock:
            before = len(downstream.logs_received)
        _send(service.port, [end])
        with downstream.lock:
            placed = _placed([ExportLogsServiceRequest.FromString(raw) for raw in downstream.logs_received[before:]])
        assert [r.event_name for res, _, r in placed if res.get("service.name") == "session-supervisor"] == [
            "session.end"]
        _check_detached(service, placed, requests)
    finally:
        service.stop(grace=0.5)
        downstream.stop()


def _config(downstream: Downstream) -> Any:
    from otel_progress.service.options import ServiceConfig

    return ServiceConfig(listen="127.0.0.1:0", health_listen="", drain_timeout=1.0,
                         forward_endpoint=downstream.endpoint)
