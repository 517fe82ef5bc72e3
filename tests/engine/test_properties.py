"""Property tests: canonicalisation is invariant where it should be, and no input,
however malformed, makes the engine or the span readers raise."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_progress import NOT_CAPTURED, Config, ProgressEngine, ToolCall, first_repeat_turn
from otel_progress.conventions.spans import SpanRecord, read_tokens, read_tool_call
from otel_progress.evidence.canonical import Digester, canonical_json, normalise_action

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.text(max_size=10), children, max_size=5),
    ),
    max_leaves=30,
)
objects = st.dictionaries(st.text(max_size=10), json_values, max_size=8)


def _shuffled(value: Any, rnd: st.DataObject) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        order = rnd.draw(st.permutations(range(len(items))))
        return {items[i][0]: _shuffled(items[i][1], rnd) for i in order}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@given(objects, st.data())
def test_key_order_never_matters(value: dict[str, Any], data: st.DataObject) -> None:
    assert canonical_json(value) == canonical_json(_shuffled(value, data))


@given(objects, st.sampled_from([None, 1, 2, 4]), st.sampled_from([(",", ":"), (", ", ": ")]))
def test_json_string_and_map_are_one_canonical_form(value: dict[str, Any], indent: int | None,
                                                    seps: tuple[str, str]) -> None:
    try:
        text = json.dumps(value, indent=indent, separators=seps, sort_keys=False)
    except ValueError:
        return
    if any(isinstance(v, float) and not math.isfinite(v) for v in _leaves(value)):
        return  # NaN/Infinity round-trip through JSON as non-standard tokens
    assert canonical_json(text) == canonical_json(value)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


@given(objects, st.data())
def test_nesting_order_invariance_reaches_the_turn_key(value: dict[str, Any], data: st.DataObject) -> None:
    calls = [("tool", value, "same"), ("tool", _shuffled(value, data), "same")]
    assert first_repeat_turn(calls, 4) == 2


@given(st.text(max_size=30), st.text(alphabet=" \t\n", min_size=1, max_size=4))
def test_action_normalisation_folds_case_and_whitespace(word: str, ws: str) -> None:
    a = normalise_action("Search", {"q": f"{word} cap"})
    b = normalise_action("search", {"q": f"{word.upper()}{ws}CAP"})
    if word.upper().lower() == word.lower():  # some characters change length when upper-cased
        assert a == b


@given(json_values)
def test_results_digest_deterministically(value: Any) -> None:
    d = Digester()
    assert d.result(value)[0] == d.result(value)[0]


attribute_values = st.one_of(
    scalars, st.binary(max_size=20), st.lists(scalars, max_size=4),
    st.dictionaries(st.text(max_size=5), scalars, max_size=4),
    st.just(float("nan")), st.text(alphabet="{}[]\":,0123456789abc", max_size=60),
)
attr_keys = st.sampled_from([
    "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
    "error.type", "input.value", "output.value", "tool.name", "openinference.span.kind", "traceloop.span.kind",
    "traceloop.entity.input", "traceloop.entity.output", "progress.state", "progress.measure",
    "progress.goal.distance", "progress.evidence", "progress.obligations", "progress.plan.step",
    "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "llm.token_count.prompt", "mcp.method.name",
])


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(attr_keys, attribute_values, max_size=10), min_size=1, max_size=12),
       st.lists(st.tuples(st.text(max_size=10), st.dictionaries(st.text(max_size=8), attribute_values,
                                                               max_size=3)), max_size=2))
def test_no_span_attributes_make_the_readers_or_engine_raise(attr_sets: list[dict[str, Any]],
                                                             events: list[tuple[str, dict[str, Any]]]) -> None:
    engine = ProgressEngine(Config())
    for i, attrs in enumerate(attr_sets):
        record = SpanRecord(trace_id="t", span_id=f"s{i}", parent_id="", name="x", start_ns=i, end_ns=i + 1,
                            attributes=attrs, error=bool(i % 2), events=events)
        read_tokens(record)
        engine.observe(read_tool_call(record), flush=bool(i % 3))
    engine.end_trace("t")
    assert engine.stats.errors == 0


@settings(max_examples=100)
@given(st.lists(st.tuples(st.text(max_size=6), json_values, json_values), max_size=15))
def test_engine_never_raises_on_arbitrary_calls(calls: list[tuple[str, Any, Any]]) -> None:
    engine = ProgressEngine(Config())
    for i, (name, args, result) in enumerate(calls):
        engine.observe(ToolCall(name=name, arguments=args, result=result, trace_id="t", span_id=str(i),
                                start_ns=i, end_ns=i + 1), flush=True)
    engine.end_trace("t")
    assert engine.stats.errors == 0


def _deep(n: int) -> Any:
    value: Any = "leaf"
    for _ in range(n):
        value = {"a": [value]}
    return value


def test_hostile_values_do_not_raise() -> None:
    engine = ProgressEngine(Config())
    hostile = [
        '{"unterminated": ',  # malformed JSON stays text
        "[" * 100_000,  # deep malformed nesting
        json.dumps(_deep(50)),
        _deep(5000),  # deeper than any recursion limit
        "x" * 10_000_000,  # a 10 MB value
        {"nan": float("nan"), "inf": float("inf")},
        b"\xff\xfe binary",
        NOT_CAPTURED,
        {1: "non-string key", None: 2},
        {"a"},  # a set
    ]
    for i, value in enumerate(hostile):
        engine.observe(ToolCall(name="t", arguments=value, result=value, trace_id="t", span_id=str(i),
                                start_ns=i, end_ns=i + 1), flush=True)
    engine.end_trace("t")
    assert engine.stats.errors == 0
