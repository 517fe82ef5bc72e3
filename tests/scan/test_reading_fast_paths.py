"""The scan's fast paths from the file's bytes to the engine's input (issue 26, item 3):
a span no convention reads costs no more than skipping it, and a span a convention reads
is never skipped.

* ``spans_from_request(lean=True)`` reads a span without a marker key or name prefix
  without its attributes and events; every marker key and prefix keeps them (the
  conventions' own spans: ``tests/conventions/conftest.py`` checks every span those tests
  build; the coding agents' golden traces: ``test_streaming``).
* The usual ids and times are read inline; every other form takes the general reader
  with the same result as before.
* ``replay_trace`` does not replay a trace without a candidate span (it only ends it).
* ``read_tool_call`` reads the ``progress.*`` fields only when one is present.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from otel_progress import Config, ProgressEngine
from otel_progress.conventions import MARKER_KEYS, MARKER_NAME_PREFIXES
from otel_progress.conventions import spans as spans_module
from otel_progress.conventions.spans import read_tool_call
from otel_progress.otlp.files import ReadProblem, encode_attributes, spans_from_request
from otel_progress.runs import replay as replay_module
from otel_progress.runs.model import RunModel
from otel_progress.runs.replay import replay_trace

TRACE = "5b8efff798038103d269b633813fc60c"
HTTP = {"http.request.method": "GET", "url.full": "https://svc.invalid/items", "http.response.status_code": 200,
        "server.address": "svc.invalid", "http.route": "/items"}


def _span(name: str, attributes: dict[str, Any], span_id: str = "eee19b7ec3c1b174", parent: str = "",
          **fields: Any) -> dict[str, Any]:
    return {"traceId": TRACE, "spanId": span_id, "parentSpanId": parent, "name": name, "kind": 1,
            "startTimeUnixNano": "1764000000000000000", "endTimeUnixNano": "1764000001000000000",
            "attributes": encode_attributes(attributes),
            "events": [{"name": "exception", "attributes": encode_attributes({"exception.type": "E"})}],
            "status": {}, **fields}


def _request(*spans: dict[str, Any]) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {"attributes": encode_attributes({"service.name": "svc"})},
                               "scopeSpans": [{"scope": {"name": "t"}, "spans": list(spans)}]}]}


def _read(*spans: dict[str, Any], lean: bool = True) -> list[Any]:
    return list(spans_from_request(_request(*spans), [], lean=lean))


def test_a_span_no_convention_reads_is_read_without_attributes_or_events() -> None:
    (span,) = _read(_span("GET /items", HTTP, status={"code": 2, "message": "boom"}))
    assert (span.attributes, span.events) == ({}, [])
    assert (span.trace_id, span.span_id, span.name, span.start_ns, span.end_ns, span.error, span.status_message) == (
        TRACE, "eee19b7ec3c1b174", "GET /items", 1764000000000000000, 1764000001000000000, True, "boom")
    assert span.resource == {"service.name": "svc"}


@pytest.mark.parametrize("key", sorted(MARKER_KEYS))
def test_every_marker_key_keeps_the_span_whole(key: str) -> None:
    attributes = {**HTTP, key: "execute_tool"}
    (lean,) = _read(_span("GET /items", attributes))
    (full,) = _read(_span("GET /items", attributes), lean=False)
    assert lean == full and lean.attributes[key] == "execute_tool" and lean.events


@pytest.mark.parametrize("prefix", MARKER_NAME_PREFIXES)
def test_every_marker_name_prefix_keeps_the_span_whole(prefix: str) -> None:
    (lean,) = _read(_span(prefix + "search", HTTP))
    assert lean.attributes == HTTP and lean.events


def test_odd_attribute_lists_neither_raise_nor_hide_a_marker() -> None:
    odd = [None, 3, {"key": ["not", "a", "string"], "value": {}}, {"key": {"k": 1}}, {"value": {"stringValue": "x"}},
           {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}}]
    (span,) = _read({**_span("x", {}), "attributes": odd})
    assert span.attributes == {"gen_ai.operation.name": "execute_tool"}
    (plain,) = _read({**_span("x", {}), "attributes": odd[:-1]})
    assert plain.attributes == {}
    (not_a_list,) = _read({**_span("x", {}), "attributes": {"key": "gen_ai.operation.name"}})
    assert not_a_list.attributes == {}


_SPAN_IDS = [
    ("eee19b7ec3c1b174", "eee19b7ec3c1b174", True),
    ("EEE19B7EC3C1B174", "eee19b7ec3c1b174", True),  # upper case: the general reader lower-cases it
    ("7uGbfsPBsXQ=", "eee19b7ec3c1b174", True),  # base64 (protobuf's JSON mapping)
    ("0000000000000000", "0000000000000000", False),  # all zero: kept, reported
    ("eee19b7ec3c1b17g", "eee19b7ec3c1b17g", False),  # not hex
    ("eee19b7ec3c1b1", "eee19b7ec3c1b1", False),  # too short
    (12, "12", False),
]
_TRACE_IDS = [
    (TRACE, TRACE, True), (TRACE.upper(), TRACE, True), ("W47/95gDgQPSabYzgT/GDA==", TRACE, True),
    ("0" * 32, "0" * 32, False), (TRACE[:-1] + "x", TRACE[:-1] + "x", False), (TRACE[:30], TRACE[:30], False),
]


@pytest.mark.parametrize(("field", "given", "read", "well_formed"),
                         [("spanId", *case) for case in _SPAN_IDS] + [("parentSpanId", *case) for case in _SPAN_IDS]
                         + [("traceId", *case) for case in _TRACE_IDS])
def test_ids_read_inline_or_not_read_as_before(field: str, given: Any, read: str, well_formed: bool) -> None:
    problems: list[ReadProblem] = []
    (span,) = spans_from_request(_request({**_span("x", {}), field: given}), problems, lean=True)
    assert {"spanId": span.span_id, "parentSpanId": span.parent_id, "traceId": span.trace_id}[field] == read
    assert (problems == []) is well_formed


@pytest.mark.parametrize(("given", "read"), [
    ("1764000000000000000", 1764000000000000000), (" 17 ", 17), ("1.5e3", 1500), ("nope", 0), (12, 12),
    (True, 1), (2.9, 2), (None, 0), ("9" * 41, 0), ({"x": 1}, 0),
])
def test_times_read_inline_or_not_read_as_before(given: Any, read: int) -> None:
    (span,) = _read({**_span("x", {}), "startTimeUnixNano": given})
    assert span.start_ns == read


def _tool(span_id: str, parent: str, at: int = 0, **extra: Any) -> dict[str, Any]:
    start = 1764000000000000000 + at * 2_000_000_000
    return _span("execute_tool search", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                                         "gen_ai.tool.call.arguments": '{"q": "x"}',
                                         "gen_ai.tool.call.result": "nothing found", **extra},
                 span_id=span_id, parent=parent, startTimeUnixNano=str(start), endTimeUnixNano=str(start + 1000))


def _count_timelines(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    timeline = replay_module.timeline

    def counting(spans: Any, lineage: Any, report: Any) -> Any:
        calls.append(1)
        return timeline(spans, lineage, report)

    monkeypatch.setattr(replay_module, "timeline", counting)
    return calls


def test_a_trace_without_a_candidate_span_is_not_replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_timelines(monkeypatch)
    spans = _read(_span("GET /", HTTP, span_id="00000000000000a1"),
                  _span("SELECT", {"db.system": "x"}, span_id="00000000000000a2", parent="00000000000000a1"))
    report = replay_trace(spans, RunModel(ProgressEngine(Config())))
    assert calls == [] and report.trace_id == TRACE
    assert (report.detections, report.runs, report.tool_calls, report.skipped) == ([], [], 0, [])


def test_a_candidate_under_plain_spans_is_replayed_in_its_agents_run(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_timelines(monkeypatch)
    agent = _span("invoke_agent helper", {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"},
                  span_id="00000000000000b2", parent="00000000000000b1", endTimeUnixNano="1764000010000000000")
    spans = _read(_span("POST /chat", HTTP, span_id="00000000000000b1", endTimeUnixNano="1764000011000000000"), agent,
                  _span("step", {}, span_id="00000000000000b3", parent="00000000000000b2",
                        endTimeUnixNano="1764000009000000000"),
                  *[_tool(f"00000000000000c{i}", "00000000000000b3", i) for i in range(4)])
    report = replay_trace(spans, RunModel(ProgressEngine(Config())))
    assert calls == [1] and report.tool_calls == 4
    assert [(r.run_id, r.agent, r.turns) for r in report.runs] == [("00000000000000b2", "helper", 4)]
    assert report.detections and {d.run_id for d in report.detections} == {"00000000000000b2"}


def test_progress_fields_are_read_only_when_one_is_present(monkeypatch: pytest.MonkeyPatch) -> None:
    (with_progress,) = _read(_tool("00000000000000d1", "", **{"progress.state": "s1", "progress.measure": 3,
                                                              "progress.evidence": "a, b", "progress.plan.node": "n"}))
    call = read_tool_call(with_progress, node="derived")
    assert (call.state, call.measure, call.evidence, call.node, call.goal, call.blocked_on) == (
        "s1", 3.0, ("a", "b"), "n", None, None)

    def never(attributes: Any) -> Any:
        raise AssertionError("progress fields read on a span without any")

    monkeypatch.setattr(spans_module, "_progress", never)
    (plain_call,) = _read(_tool("00000000000000d2", ""))
    call = read_tool_call(plain_call, node="derived")
    assert (call.state, call.plan_step, call.goal, call.goal_distance, call.measure, call.evidence,
            call.obligations, call.blocked_on, call.node) == (None, None, None, None, None, None, None, None,
                                                              "derived")


def test_the_request_round_trips_through_json() -> None:
    """(the helpers above write what a file holds: the spans survive ``json`` unchanged)"""
    doc = _request(_tool("00000000000000e1", ""))
    assert _read(*json.loads(json.dumps(doc))["resourceSpans"][0]["scopeSpans"][0]["spans"]) == _read(
        *doc["resourceSpans"][0]["scopeSpans"][0]["spans"])
