"""Run state that outlives a ``serve`` process, for the runs that are no trace: a coding
agent's log runs (its prompts, read from its OTLP log records), grouped runs (root tool
calls of one conversation, each its own trace) and conversations followed across traces;
and the signal that reported for an agent session, carried with its runs. In-process
services over real gRPC, a real Redis server; each property both ways:

* ``--state-dir``: a restart between two halves of a looping run gives the detections of
  the run seen whole by one process (the same turns, levels, each once); without it the
  restarted service starts the run over (a level again, or a detection missing);
* ``--state-store``: two replicas taking a run's requests in turn give the detections of
  one replica; without the store they do not.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub

from otel_progress import Config
from otel_progress.service.options import ServiceConfig
from otel_progress.service.server import ProgressService

from ..logs.conftest import b64_ids, documents, golden
from ..logs.test_serve_logs import LogsSink
from ..redis_server import redis_server
from .helpers import (
    Client,
    Downstream,
    Request,
    barren_chat_turn,
    detections_on,
    request,
    span,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def sink() -> Iterator[LogsSink]:
    s = LogsSink()
    yield s
    s.server.stop(0)


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    ds = Downstream().start()
    yield ds
    ds.stop()


def _service(forward: str, **options: Any) -> ProgressService:
    options.setdefault("listen", "127.0.0.1:0")
    options.setdefault("health_listen", "")
    options.setdefault("drain_timeout", 1.0)
    return ProgressService(ServiceConfig(forward_endpoint=forward, **options), Config()).start()


# -- log runs ------------------------------------------------------------------------------


def _record_requests(name: str) -> list[ExportLogsServiceRequest]:
    """A golden capture of a real CLI, one request per log record (in the capture's order)."""
    out = []
    for doc in documents(golden(name)):
        whole = json_format.ParseDict(b64_ids(doc), ExportLogsServiceRequest(), ignore_unknown_fields=True)
        for rl in whole.resource_logs:
            for sl in rl.scope_logs:
                for record in sl.log_records:
                    one = ExportLogsServiceRequest()
                    target = one.resource_logs.add(resource=rl.resource).scope_logs.add(scope=sl.scope)
                    target.log_records.append(record)
                    out.append(one)
    return out


def _send_logs(service: ProgressService, requests: Sequence[ExportLogsServiceRequest]) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{service.port}") as channel:
        stub = LogsServiceStub(channel)
        for req in requests:
            stub.Export(req, timeout=10)


def _log_detections(sink: LogsSink) -> list[tuple[str, int, int]]:
    """``(reason, level, turn)`` of every detection record the sink received."""
    out = []
    for record in sink.records():
        if record.event_name in ("progress.no_progress", "progress.livelock"):
            attrs = {kv.key: kv.value for kv in record.attributes}
            out.append((attrs["progress.reason"].string_value, attrs["progress.level"].int_value,
                        attrs["progress.turn"].int_value))
    return out


LOOP = "codex-0.171.0-loop.jsonl"


def _whole_log_run(sink: LogsSink, requests: Sequence[ExportLogsServiceRequest]) -> list[tuple[str, int, int]]:
    service = _service(f"127.0.0.1:{sink.port}")
    try:
        _send_logs(service, requests)
    finally:
        service.stop(grace=0.5)
    found = _log_detections(sink)
    del sink.received[:]
    return found


@pytest.mark.parametrize("state", [True, False])
def test_a_log_run_is_continued_after_a_restart(sink: LogsSink, tmp_path, state: bool) -> None:
    requests = _record_requests(LOOP)
    whole = _whole_log_run(sink, requests)
    assert len(whole) >= 2, whole  # (the capture loops past level 1)
    cut = len(requests) // 2
    options = {"state_dir": str(tmp_path)} if state else {}
    a = _service(f"127.0.0.1:{sink.port}", **options)
    try:
        _send_logs(a, requests[:cut])
    finally:
        a.stop(grace=0.5)
    before = _log_detections(sink)
    b = _service(f"127.0.0.1:{sink.port}", **options)
    try:
        if state:
            assert b.logs.open_runs == 1  # (restored from the checkpoint)
        _send_logs(b, requests[cut:])
    finally:
        b.stop(grace=0.5)
    found = _log_detections(sink)
    assert 0 < len(before) < len(whole), (before, whole)  # (the cut is inside the loop)
    if state:
        assert found == whole
    else:
        assert found != whole, found  # (the restarted service started the run over)


@pytest.mark.parametrize("store", [True, False])
def test_two_replicas_sharing_redis_continue_a_log_run_in_turn(sink: LogsSink, store: bool) -> None:
    requests = _record_requests(LOOP)
    whole = _whole_log_run(sink, requests)
    with redis_server() as url:
        options = {"state_store": url} if store else {}
        replicas = [_service(f"127.0.0.1:{sink.port}", **options) for _ in range(2)]
        try:
            step = max(1, len(requests) // 6)  # (the run moves between the replicas six times)
            for n, start in enumerate(range(0, len(requests), step)):
                _send_logs(replicas[n % 2], requests[start:start + step])
        finally:
            for replica in replicas:
                replica.stop(grace=0.5)
    found = _log_detections(sink)
    if store:
        assert found == whole
        continued = sum(r.metrics.value("progress.service.state.continued", {"source": "store"}) or 0
                        for r in replicas)
        assert continued >= 5, continued
    else:
        assert found != whole, found


# -- grouped runs --------------------------------------------------------------------------


def _root_call(trace: int, turn: int) -> Any:
    """A root tool call naming its conversation (a trace of its own), the same every turn."""
    return span(trace, 100 + turn, None, "execute_tool search", turn * 2.0, turn * 2.0 + 0.5, {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
        "gen_ai.tool.call.arguments": {"q": "same"}, "gen_ai.tool.call.result": '{"items": []}',
        "gen_ai.conversation.id": "client-7"})


def _trace_detections(ds: Downstream) -> list[tuple[str, int]]:
    out = []
    for raw in ds.received:
        for _span, _event, attrs in detections_on(Request.FromString(raw)):
            out.append((str(attrs["progress.reason"]), int(attrs["progress.level"])))
    return out


def _send_calls(service: ProgressService, turns: Sequence[int]) -> None:
    client = Client(f"127.0.0.1:{service.port}")
    try:
        for turn in turns:
            client.export(request([_root_call(900 + turn, turn)]))
    finally:
        client.close()


TURNS = list(range(1, 13))


def _whole_group(ds: Downstream) -> list[tuple[str, int]]:
    service = _service(ds.endpoint)
    try:
        _send_calls(service, TURNS)
    finally:
        service.stop(grace=0.5)
    found = _trace_detections(ds)
    del ds.received[:]
    assert sorted(lv for _r, lv in found) == [1, 2, 3], found  # (the grouped run is parked)
    return found


@pytest.mark.parametrize("state", [True, False])
def test_a_grouped_run_is_continued_after_a_restart(downstream: Downstream, tmp_path, state: bool) -> None:
    whole = _whole_group(downstream)
    options = {"state_dir": str(tmp_path)} if state else {}
    a = _service(downstream.endpoint, **options)
    try:
        _send_calls(a, TURNS[:5])
    finally:
        a.stop(grace=0.5)
    assert 0 < len(_trace_detections(downstream)) < len(whole)
    b = _service(downstream.endpoint, **options)
    try:
        _send_calls(b, TURNS[5:])
    finally:
        b.stop(grace=0.5)
    found = _trace_detections(downstream)
    if state:
        assert found == whole
    else:
        assert found != whole, found  # (a level announced again: the run started over)


@pytest.mark.parametrize("store", [True, False])
def test_two_replicas_sharing_redis_continue_a_grouped_run_in_turn(downstream: Downstream, store: bool) -> None:
    whole = _whole_group(downstream)
    with redis_server() as url:
        options = {"state_store": url} if store else {}
        replicas = [_service(downstream.endpoint, **options) for _ in range(2)]
        try:
            for n, start in enumerate(range(0, len(TURNS), 2)):
                _send_calls(replicas[n % 2], TURNS[start:start + 2])
        finally:
            for replica in replicas:
                replica.stop(grace=0.5)
    found = _trace_detections(downstream)
    if store:
        assert found == whole
    else:
        assert found != whole, found


def test_a_logs_request_retried_on_the_replica_that_continues_its_run_is_annotated_again(sink: LogsSink) -> None:
    """Replica A reads a request and finds the loop, but its forward fails (the sender
    retries); the retry reaches replica B (a ring change meanwhile). B continues the run
    from the store, with the detections A placed on its calls: the retried request gets
    them (its calls are not counted again, so without them the detection would be lost)."""
    whole = ExportLogsServiceRequest()
    for req in _record_requests("claude-code-2.1.332-failing-command-details.jsonl"):
        whole.MergeFrom(req)
    with redis_server() as url:
        a, b = (_service(f"127.0.0.1:{sink.port}", state_store=url) for _ in range(2))
        try:
            sink.fail_codes = [grpc.StatusCode.UNAVAILABLE]
            with pytest.raises(grpc.RpcError):
                _send_logs(a, [whole])
            assert sink.records() == []
            _send_logs(b, [whole])  # the retry
        finally:
            a.stop(grace=0.5)
            b.stop(grace=0.5)
    found = _log_detections(sink)
    assert [reason for reason, _level, _turn in found] == ["error_recurrence"], found
    assert b.metrics.value("progress.service.state.continued", {"source": "store"}) == 1


# -- conversations ---------------------------------------------------------------------------


def _conversation_levels(ds: Downstream) -> list[int]:
    out = []
    for raw in ds.received:
        for span_id, _event, attrs in detections_on(Request.FromString(raw)):
            if span_id == "0000000000000001" and attrs.get("progress.scope") == "conversation":
                out.append(int(attrs["progress.level"]))
    return sorted(out)


@pytest.mark.parametrize("store", [True, False])
def test_a_conversation_moving_between_replicas_sharing_redis_is_continued(downstream: Downstream,
                                                                          store: bool) -> None:
    """A chat agent doing the same lookups with the same answers, one trace per turn, its
    turns alternating between two replicas (a ring change of the conversation gateway, and
    back): with the store each replica continues the conversation's turns from the other's,
    so the 4th turn (the 3rd barren one) is the detection, as on one replica; without it
    neither replica sees three barren turns and nothing is said."""
    with redis_server() as url:
        options = {"state_store": url} if store else {}
        replicas = [_service(downstream.endpoint, **options) for _ in range(2)]
        try:
            for n, trace in enumerate(range(701, 705)):
                client = Client(f"127.0.0.1:{replicas[n % 2].port}")
                try:
                    client.export(request(barren_chat_turn(trace, "chat-9")))
                finally:
                    client.close()
        finally:
            for replica in replicas:
                replica.stop(grace=0.5)
    assert _conversation_levels(downstream) == ([1] if store else [])


# -- one loop, one report, after a hand-off ----------------------------------------------------


@pytest.mark.parametrize("carried", [True, False])
def test_the_signal_that_reported_for_a_session_goes_with_its_run(carried: bool) -> None:
    """A coding agent's session seen through its logs and its traces is reported by the
    signal that reported first (runs/signals.py). Its log run carried to another process
    takes that decision with it: the spans' detections of the session are then dropped
    there too; without it both signals would report the one loop."""
    from otel_progress.engine import ProgressEngine
    from otel_progress.runs.carry import export_log_run, import_log_run
    from otel_progress.runs.logruns import LogRun, LogRunTracker
    from otel_progress.runs.model import RunModel
    from otel_progress.runs.signals import LOGS, SPANS

    here = LogRunTracker(RunModel(ProgressEngine(Config())))
    key = "codex:sess-1:prompt-1"
    here.model.tag(key, key, "sess-1", LOGS)
    here.model.arbiter.saw("sess-1", LOGS, 1)
    assert here.model.arbiter.decide("sess-1", LOGS) == "report"  # (the logs reported a detection)
    here.runs[key] = LogRun(key, session="sess-1", last_seen=here.clock())
    bundle = export_log_run(here, key)
    assert bundle is not None and bundle.sessions == [("sess-1", (0, 1, LOGS))]
    if not carried:
        bundle.sessions = []
    there = LogRunTracker(RunModel(ProgressEngine(Config())))
    import_log_run(there, bundle)
    assert list(there.runs) == [key]
    assert there.model.arbiter.decide("sess-1", SPANS) == ("drop" if carried else "report")


def test_a_log_run_moving_back_and_forth_keeps_one_copy_of_its_placements() -> None:
    """Each hand-off carries the detections placed on the run's calls; the replica that
    continues the run takes them instead of what it remembered of the run (not beside it:
    a run moving back and forth would double them at every move)."""
    from otel_progress.engine import ProgressEngine
    from otel_progress.service.logs import LogsDetector
    from otel_progress.service.metrics import ServiceMetrics
    from otel_progress.service.state import RedisStore, StateKeeper

    def detector(url: str | None) -> LogsDetector:
        engine = ProgressEngine(Config())
        det = LogsDetector(engine, ServiceMetrics())
        if url:
            det.keeper = StateKeeper(engine.state_codec(), det.metrics, store=RedisStore(url, 300.0))
        return det

    def placed(det: LogsDetector) -> list[tuple[str, list[tuple[str, int]]]]:
        (key,) = det.run_keys()
        return [(call, [(d.reason.value, int(d.level)) for d in dets]) for call, dets in det._placed.of_run(key)]

    requests = [r.SerializeToString() for r in _record_requests(LOOP)]
    whole = detector(None)
    for raw in requests:
        whole.process(raw)
    with redis_server() as url:
        pair = [detector(url), detector(url)]
        for n, raw in enumerate(requests):  # (the run moves at every request)
            pair[n % 2].process(raw)
    last = pair[(len(requests) - 1) % 2]
    assert placed(whole) and placed(last) == placed(whole)
