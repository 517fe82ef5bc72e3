"""Odd input never crashes the log path: random JSON where OTLP/JSON logs are expected
goes through the adapter, the readers and the tracker, and through ``scan``, without an
exception or a traceback."""

from __future__ import annotations

import io
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_progress import ProgressEngine
from otel_progress.otlp.logs_json import records_from_request
from otel_progress.runs.logruns import LogRunTracker
from otel_progress.scan import run_scan

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                     st.text(max_size=12))
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                     max_leaves=20)
_value = st.one_of(_json, st.fixed_dictionaries({"stringValue": _json}), st.fixed_dictionaries({"intValue": _json}),
                   st.fixed_dictionaries({"kvlistValue": _json}), st.fixed_dictionaries({"arrayValue": _json}))
_names = st.sampled_from(["codex.tool_result", "claude_code.tool_result", "gemini_cli.tool_call",
                          "qwen-code.tool_call", "codex.sse_event", "x"])
_keys = st.sampled_from(["conversation.id", "session.id", "prompt.id", "prompt_id", "tool_name", "function_name",
                         "arguments", "output", "success", "event.sequence", "event.timestamp", "function_args",
                         "tool_parameters", "duration_ms", "call_id", "event.name"])
_record = st.fixed_dictionaries({
    "eventName": st.one_of(_names, _json),
    "timeUnixNano": _json,
    "traceId": _json,
    "attributes": st.one_of(st.lists(st.fixed_dictionaries({"key": _keys, "value": _value}), max_size=8), _json),
    "body": _value,
})
_doc = st.fixed_dictionaries({"resourceLogs": st.one_of(
    st.lists(st.fixed_dictionaries({"scopeLogs": st.lists(st.fixed_dictionaries(
        {"logRecords": st.lists(_record, max_size=5)}), max_size=2)}), max_size=2), _json)})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_doc, min_size=1, max_size=3))
def test_adapter_readers_and_tracker_are_total(docs: list) -> None:
    tracker = LogRunTracker(ProgressEngine(), reorder_window=2, max_runs=2)
    for doc in docs:
        try:
            records = list(records_from_request(doc, []))
        except ValueError:
            continue
        for record in records:
            tracker.add(record)
    tracker.finish()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.lists(_doc, min_size=1, max_size=3))
def test_scan_never_raises(tmp_path: Path, docs: list) -> None:
    path = tmp_path / "fuzz.jsonl"
    path.write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    err = io.StringIO()
    code = run_scan([str(path)], stdout=io.StringIO(), stderr=err)
    assert code in (0, 1, 2)
    assert "Traceback" not in err.getvalue()
