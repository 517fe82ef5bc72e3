"""OTLP/JSON and protobuf logs to LogRecordView: the same view from both, odd input never
raises, unreadable parts are reported."""

from __future__ import annotations

import base64

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from otel_progress.otlp.files import ReadProblem
from otel_progress.otlp.logs_json import event_name_of, is_logs_document, records_from_request
from otel_progress.otlp.logs_proto import records_from_proto

from .conftest import b64_ids, documents, golden

TRACE = "0af7651916cd43dd8448eb211c80319c"


def _doc(record: dict, resource: list | None = None) -> dict:
    return {"resourceLogs": [{"resource": {"attributes": resource or []},
                              "scopeLogs": [{"scope": {"name": "s"}, "logRecords": [record]}]}]}


def test_values_ids_and_times() -> None:
    record = {"timeUnixNano": "0", "observedTimeUnixNano": "1700000000000000000",
              "traceId": base64.b64encode(bytes.fromhex(TRACE)).decode(), "spanId": "00f067aa0ba902b7",
              "severityNumber": 9, "body": {"stringValue": "claude_code.tool_result"},
              "attributes": [{"key": "n", "value": {"intValue": "42"}},
                             {"key": "ok", "value": {"boolValue": True}},
                             {"key": "m", "value": {"kvlistValue": {"values": [
                                 {"key": "a", "value": {"doubleValue": 1.5}}]}}}]}
    [view] = records_from_request(_doc(record, [{"key": "service.name", "value": {"stringValue": "x"}}]))
    assert view.time_ns == view.observed_ns == 1_700_000_000_000_000_000  # time 0: the observed time
    assert view.trace_id == TRACE and view.span_id == "00f067aa0ba902b7"
    assert view.event_name == "claude_code.tool_result"  # from the body
    assert view.attributes == {"n": 42, "ok": True, "m": {"a": 1.5}}
    assert view.resource == {"service.name": "x"} and view.scope == "s" and view.severity == 9


def test_event_name_sources() -> None:
    assert event_name_of("codex.tool_result", {}, None) == "codex.tool_result"
    # Codex writes a source location into eventName: the attribute wins then
    assert event_name_of("event otel/src/x.rs:1", {"event.name": "codex.tool_result"}, None) == "codex.tool_result"
    assert event_name_of("", {}, "a plain message.") == ""
    assert event_name_of(None, {"event.name": 5}, ["x"]) == ""


@pytest.mark.parametrize("bad", [
    {"resourceLogs": [1, {"scopeLogs": "x"}, {"scopeLogs": [{"logRecords": [None, "y", {"attributes": 3,
                                                                                     "body": [1]}]}]}]},
    {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"timeUnixNano": "soon", "traceId": "zz", "body": {"intValue": []},
                                                      "attributes": [{"key": 1}, {"value": {}}]}]}]}]},
])
def test_odd_types_never_raise(bad: dict) -> None:
    problems: list[ReadProblem] = []
    views = list(records_from_request(bad, problems, source="f", line=3))
    assert len(views) == 1
    assert all(p.source == "f" and p.line == 3 for p in problems)


def test_not_a_logs_document() -> None:
    assert not is_logs_document({"resourceSpans": []})
    with pytest.raises(ValueError, match="resourceLogs"):
        list(records_from_request({"resourceSpans": []}))
    with pytest.raises(ValueError, match="not a list"):
        list(records_from_request({"resourceLogs": {"a": 1}}))


def test_protobuf_gives_the_same_views_as_json() -> None:
    for name in ("codex-0.171.0-loop.jsonl", "claude-code-2.1.332-loop-details.jsonl", "gemini-cli-0.61.0-loop.jsonl"):
        for doc in documents(golden(name)):
            from_json = list(records_from_request(doc))
            message = json_format.ParseDict(b64_ids(doc), ExportLogsServiceRequest(), ignore_unknown_fields=True)
            from_proto = [view for *_, view in records_from_proto(message)]
            assert from_proto == from_json


def test_protobuf_name_filter_keeps_indices() -> None:
    from otel_progress.conventions.logs import event_names

    for doc in documents(golden("gemini-cli-0.61.0-loop.jsonl")):
        message = json_format.ParseDict(b64_ids(doc), ExportLogsServiceRequest(), ignore_unknown_fields=True)
        every = list(records_from_proto(message))
        known = list(records_from_proto(message, names=event_names()))
        assert known == [item for item in every if item[3].event_name in event_names()]
        assert len(known) < len(every)  # the prompt and response records are not decoded


def _every_golden_document() -> list[dict]:
    from .conftest import GOLDEN

    return [d for path in sorted(GOLDEN.glob("*.jsonl")) if not path.name.endswith(".traces.jsonl")
            for d in documents(path) if "resourceLogs" in d]


def test_records_no_reader_reads_are_read_lean_with_the_same_outcome() -> None:
    """With ``names``, a record no reader reads is given without its attributes and body;
    every reader reads the same observations from the lean views as from the full ones,
    and the records it reads are given whole. Odd records too: a known name only in the
    ``event.name`` attribute (beside another OTLP event name), in a body that is a bare
    string or an undecodable ``bytesValue``, or in a ``stringValue`` that is not a string."""
    from otel_progress.conventions.logs import event_names, read_log

    names = event_names()
    odd = _doc({"eventName": "foo", "body": {"bytesValue": "claude_code.tool_result"},
                "attributes": [{"key": "event.name", "value": {"stringValue": "x"}},
                               {"key": "event.name", "value": {"stringValue": "codex.tool_result"}}]})
    odd["resourceLogs"][0]["scopeLogs"][0]["logRecords"] += [
        {"body": "gemini_cli.tool_call"}, {"body": {"bytesValue": "claude_code.tool_result"}},
        {"body": {"stringValue": 12.5}}, {"body": {"kvlistValue": {"values": []}}, "eventName": "a b"},
        {"body": {"arrayValue": {}, "stringValue": "tool_result"}}]
    lean_views = 0
    for doc in [*_every_golden_document(), odd]:
        full = list(records_from_request(doc))
        lean = list(records_from_request(doc, names=names))
        assert len(full) == len(lean)
        for f, g in zip(full, lean, strict=True):
            assert read_log(f) == read_log(g)
            if g != f:
                lean_views += 1
                assert f.event_name not in names and g.event_name == f.event_name
                assert (g.attributes, g.body) == ({}, None) and g.index == f.index and g.time_ns == f.time_ns
    assert lean_views > 100  # the captures' prompts, API requests and other events


def test_a_slim_request_gives_the_views_of_the_decoded_message() -> None:
    """``records_from_slim`` (the service: records decoded one by one, only those whose
    bytes hold a known name) yields what ``records_from_proto`` yields for the decoded
    message, with and without the name filter, on every golden capture; an odd record too
    (a known name only in an ``event.name`` attribute, after an OTLP name of 200 characters)."""
    from otel_progress.conventions.logs import event_names
    from otel_progress.otlp.logs_proto import records_from_slim
    from otel_progress.service.otlp import SlimLogsRequest

    odd = _doc({"eventName": "x" * 200, "body": {"stringValue": "y"},
                "attributes": [{"key": "event.name", "value": {"stringValue": "codex.tool_result"}}]})
    for doc in [*_every_golden_document(), odd]:
        message = json_format.ParseDict(b64_ids(doc), ExportLogsServiceRequest(), ignore_unknown_fields=True)
        slim = SlimLogsRequest.FromString(message.SerializeToString())
        for names in (None, event_names()):
            assert list(records_from_slim(slim, names=names)) == list(records_from_proto(message, names=names))
