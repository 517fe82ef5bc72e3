"""The facade (``otel_progress.conventions.spans``) and the registry: composition, the one marker list,
and total readers (issue 10 item 1: ``classify`` raised on a list-valued
``gen_ai.operation.name``)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_progress import conventions
from otel_progress.conventions import CONVENTIONS, MARKER_BYTES, MARKER_KEYS, MARKER_NAME_PREFIXES, is_candidate
from otel_progress.conventions.spans import (
    SpanKind,
    SpanRecord,
    agent_name,
    classify,
    read_tokens,
    read_tool_call,
    run_group,
)

from .helpers import record

_KEYS = sorted(MARKER_KEYS | {
    "gen_ai.tool.name", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "gen_ai.agent.name",
    "gen_ai.agent.id", "gen_ai.input.messages", "gen_ai.output.messages", "tool.name", "tool.arguments",
    "input.value", "output.value", "traceloop.entity.name", "traceloop.entity.input", "traceloop.entity.output",
    "tool_arguments", "tool_response", "logfire.msg", "agent_name", "agent.name",
    "gcp.vertex.agent.tool_call_args", "gcp.vertex.agent.tool_response", "error.type", "progress.state",
    "progress.goal.distance", "progress.measure", "progress.evidence", "mcp.session.id", "session.id",
    "gen_ai.conversation.id", "gen_ai.usage.total_tokens",
})
_VALUES = {"execute_tool", "invoke_agent", "chat", "TOOL", "AGENT", "LLM", "tool", "agent", "task", "tools/call"}
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.just(1.7e308), st.text(max_size=12), st.binary(max_size=12),
    st.sampled_from(sorted(_VALUES)), st.just(10**400), st.just('{"input_str": 1, "inputs": [1]}'),
    st.just('{"output": {"lc": 1, "type": "constructor", "id": "x"}}'), st.just('[{"parts": 3}]'),
)
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["parts", "type", "role", "content", "args",
                                                                  "kwargs", "response", "name", "raw_output",
                                                                  "raw_input", "text", "json", "id"]),
                                                 inner, max_size=4)), max_leaves=8)
_attributes = st.dictionaries(st.sampled_from(_KEYS), _values, max_size=8)
_events = st.lists(st.tuples(st.sampled_from(["gen_ai.tool.message", "gen_ai.choice", "exception",
                                              "gen_ai.client.inference.operation.details"]), _attributes),
                   max_size=3)
_names = st.one_of(st.text(max_size=20), st.sampled_from(["execute_tool x", "invoke_agent", "x.tool",
                                                           "FunctionTool.task", "MCP send tools/call x"]))


@settings(max_examples=300, deadline=None)
@given(attrs=_attributes, events=_events, name=_names, resource=_attributes, parent=st.sampled_from(["", "ab"]))
def test_readers_never_raise(attrs: dict, events: list, name: str, resource: dict, parent: str) -> None:
    span = SpanRecord("t" * 32, "s" * 16, parent, name, 1, 2, attrs, False, "", events, resource)
    kind = classify(span)
    assert isinstance(kind, SpanKind)
    call = read_tool_call(span, trace_key=run_group(span))
    assert isinstance(call.name, str) and call.name
    assert call.goal_distance is None or math.isfinite(call.goal_distance)
    assert isinstance(read_tokens(span), int)
    name_of_agent = agent_name(span)
    assert name_of_agent is None or isinstance(name_of_agent, str)
    if kind is not SpanKind.OTHER:  # the fast paths never reject a span classify takes
        assert is_candidate(attrs, name)


def test_unhashable_operation_name() -> None:
    span = record("x", {"gen_ai.operation.name": ["execute_tool"], "openinference.span.kind": {"k": 1},
                        "traceloop.span.kind": ["tool"], "mcp.method.name": {"a": 1}})
    assert classify(span) is SpanKind.OTHER
    assert read_tokens(record("m", {"gen_ai.usage.input_tokens": 10**400, "gen_ai.usage.output_tokens": math.nan})) == 0
    digits = record("execute_tool s", {"gen_ai.operation.name": "execute_tool", "progress.state": 10**5000,
                                       "progress.evidence": [10**5000], "progress.measure": 10**5000})
    assert read_tool_call(digits).state == "<number>" and read_tool_call(digits).measure is None
    huge = record("m", {"gen_ai.usage.input_tokens": 1.7e308, "gen_ai.usage.output_tokens": 1.7e308})
    assert read_tokens(huge) == 2**53  # capped, not an overflow


def test_marker_lists_cover_every_convention() -> None:
    for convention in CONVENTIONS:
        assert convention.marker_keys <= MARKER_KEYS
        assert set(convention.marker_name_prefixes) <= set(MARKER_NAME_PREFIXES)
    assert MARKER_BYTES[0] == b"gen_ai."
    for convention in CONVENTIONS:
        assert set(convention.marker_bytes) <= set(MARKER_BYTES)
    assert not is_candidate({"http.method": "GET", "db.system": "sqlite"}, "GET /")


@settings(max_examples=300, deadline=None)
@given(attrs=_attributes, name=_names)
def test_the_service_search_never_misses_a_classified_span(attrs: dict, name: str) -> None:
    """Serialized as OTLP protobuf, every span that classify takes contains a marker byte
    string (the service forwards the others unparsed)."""
    from opentelemetry.proto.trace.v1 import trace_pb2

    from otel_progress.service.otlp import key_values, may_be_genai, span_record

    raw = trace_pb2.Span(trace_id=b"t" * 16, span_id=b"s" * 8, name=name, attributes=key_values(
        {k: v for k, v in attrs.items() if v is not None})).SerializeToString()
    if classify(span_record(trace_pb2.Span.FromString(raw))) is not SpanKind.OTHER:
        assert may_be_genai(raw)


def test_a_failing_convention_is_skipped(monkeypatch) -> None:
    class Broken(conventions.SpanConvention):
        def classify(self, span):
            raise RuntimeError("bug")

        def read_tool(self, span):
            raise RuntimeError("bug")

    broken = Broken()
    monkeypatch.setattr(conventions, "_CLASSIFIERS", (broken, *conventions._CLASSIFIERS))
    monkeypatch.setattr(conventions, "_TOOL_READERS", (broken, *conventions._TOOL_READERS))
    span = record("execute_tool s", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.result": "r"})
    assert classify(span) is SpanKind.TOOL
    assert read_tool_call(span).result == "r"


def test_fields_compose_across_conventions() -> None:
    # OpenInference span processor output over a GenAI span: the tool name from GenAI,
    # the content from OpenInference.
    span = record("execute_tool s", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                                     "openinference.span.kind": "TOOL", "input.value": "{}", "output.value": "r"})
    call = read_tool_call(span)
    assert (call.name, call.arguments, call.result) == ("search", "{}", "r")
