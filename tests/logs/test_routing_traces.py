"""The gateway's trace routing by session (collector-config/gateway-conversation.yaml) sends
a coding CLI's spans where its log records go (gateway-logs.yaml), for what the real CLIs
send (the golden captures of tests/coding_agents: Claude Code puts ``session.id`` on each
span, Gemini CLI and Qwen Code on the resource).

The load_balancing exporter with ``routing_key: attributes`` splits a traces batch by trace
ID, then builds one key per ResourceSpans from ``routing_attributes``, each looked up in the
resource, then the first scope's attributes, then the FIRST span of that scope; an attribute
found nowhere adds ``name=|`` (opentelemetry-collector-contrib v0.161.0,
exporter/loadbalancingexporter/trace_exporter.go, ``routingIdentifiersFromTraces``). The
logs exporter builds its key the same way from the same list. This test computes both keys
for every export request of a capture and checks that each session's spans get one key, its
log records' key. The routing itself runs in the real Collector in
tests/collector/test_collector_conversation.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_progress.otlp.files import _attributes

from .conftest import GOLDEN, documents

CONFIG = Path(__file__).resolve().parents[2] / "collector-config"


def _lists() -> tuple[list[str], list[str]]:
    logs = yaml.safe_load((CONFIG / "gateway-logs.yaml").read_text())["exporters"]["load_balancing/logs"]
    traces = yaml.safe_load((CONFIG / "gateway-conversation.yaml").read_text())["exporters"]
    return logs["routing_attributes"], traces["load_balancing/sessions"]["routing_attributes"]


def _key(resource: dict[str, Any], scope: dict[str, Any], first: dict[str, Any], names: list[str]) -> str:
    key = ""
    for name in names:
        for where in (resource, scope, first):
            if name in where:
                key += f"{name}={where[name]}|"
                break
        else:
            key += f"{name}=|"
    return key


def _session_of(resource: dict[str, Any], item: dict[str, Any]) -> str | None:
    for where in (item, resource):
        for name in ("session.id", "conversation.id"):
            if name in where:
                return str(where[name])
    return None


def _keys(path: Path, names: list[str], signal: str) -> dict[str, set[str]]:
    """Session -> the keys its items (spans or records) were routed on."""
    scopes_key, items_key = ("scopeSpans", "spans") if signal == "traces" else ("scopeLogs", "logRecords")
    out: dict[str, set[str]] = {}
    for doc in documents(path):
        for group in doc.get("resourceSpans" if signal == "traces" else "resourceLogs", []):
            resource = _attributes((group.get("resource") or {}).get("attributes"))
            # the filter of the pipeline that routes by session keeps what names a session
            kept = []
            for scope in group.get(scopes_key) or []:
                items = [i for i in scope.get(items_key) or []
                         if _session_of(resource, _attributes(i.get("attributes")))]
                if items:
                    kept.append((scope, items))
            if not kept:
                continue
            scope, items = kept[0]
            batches: dict[str, list[Any]] = {}
            if signal == "traces":  # split by trace ID first
                for scope_, items_ in kept:
                    for item in items_:
                        batches.setdefault(item.get("traceId", ""), []).append((scope_, item))
            else:
                batches[""] = [(scope, i) for scope_, items_ in kept for i in items_]
            for batch in batches.values():
                first_scope, first = batch[0]
                key = _key(resource, _attributes((first_scope.get("scope") or {}).get("attributes")),
                           _attributes(first.get("attributes")), names)
                for _scope, item in batch:
                    session = _session_of(resource, _attributes(item.get("attributes")))
                    out.setdefault(str(session), set()).add(key)
    return out


@pytest.mark.parametrize("path", sorted(p.name for p in GOLDEN.glob("*.traces.jsonl")))
def test_a_sessions_spans_route_where_its_log_records_go(path: str) -> None:
    logs_names, traces_names = _lists()
    assert traces_names == logs_names
    spans = _keys(GOLDEN / path, traces_names, "traces")
    assert spans, f"{path}: no span names a session"
    for session, keys in spans.items():
        assert len(keys) == 1 and f"={session}|" in next(iter(keys)), f"{session}: spans routed on {keys}"
    logs_path = GOLDEN / path.replace(".traces.jsonl", ".jsonl")
    if not logs_path.exists():
        return  # a capture of the spans alone
    records = _keys(logs_path, logs_names, "logs")
    for session, keys in spans.items():
        assert keys == records.get(session), f"{session}: spans on {keys}, log records on {records.get(session)}"
