"""The gateway's logs routing (collector-config/gateway-logs.yaml) keeps each run on one
replica for what the real CLIs send.

The load_balancing exporter with ``routing_key: attributes`` builds one key per
ResourceLogs from ``routing_attributes``, each looked up in the resource, then the first
scope's attributes, then the first record of that scope (opentelemetry-collector-contrib,
exporter/loadbalancingexporter/log_exporter.go, ``splitLogsByAttributes``). This test
computes that key for every export request of the golden captures (what each real CLI
sent), after the gateway's filter/run_records has set aside the records without a run id
(and the scopes it empties), and checks that all requests of one run get the same,
non-empty key, and that no record set aside is one a reader uses. The routing itself runs
in the real Collector in tests/coding_agents/test_e2e_logs.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_progress.conventions.logs import read_log
from otel_progress.otlp.files import _attributes
from otel_progress.otlp.logs_json import records_from_request

from .conftest import GOLDEN, documents

GATEWAY_LOGS = Path(__file__).resolve().parents[2] / "collector-config" / "gateway-logs.yaml"


def _routing_attributes() -> list[str]:
    config = yaml.safe_load(GATEWAY_LOGS.read_text())
    exporter = config["exporters"]["load_balancing/logs"]
    assert exporter["routing_key"] == "attributes"
    runs = config["service"]["pipelines"]["logs/runs"]
    assert "filter/run_records" in runs["processors"] and runs["exporters"] == ["load_balancing/logs"]
    return exporter["routing_attributes"]


def _has_run_id(record: dict[str, Any], resource: dict[str, Any], names: list[str]) -> bool:
    attributes = _attributes(record.get("attributes"))
    return any(name in attributes or name in resource for name in names)


def _run_records(resource_logs: dict[str, Any], names: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What filter/run_records keeps of a ResourceLogs (empty scopes dropped), and what it
    sets aside."""
    resource = _attributes((resource_logs.get("resource") or {}).get("attributes"))
    kept, aside = [], []
    for scope in resource_logs.get("scopeLogs") or []:
        records = scope.get("logRecords") or []
        keep = [r for r in records if _has_run_id(r, resource, names)]
        aside += [r for r in records if not _has_run_id(r, resource, names)]
        if keep:
            kept.append({**scope, "logRecords": keep})
    return {**resource_logs, "scopeLogs": kept}, aside


def _key(resource_logs: dict[str, Any], names: list[str]) -> str:
    resource = _attributes((resource_logs.get("resource") or {}).get("attributes"))
    scopes = resource_logs.get("scopeLogs") or []
    key = ""
    for name in names:
        if name in resource:
            key += str(resource[name])
            continue
        if not scopes:
            continue
        scope = _attributes((scopes[0].get("scope") or {}).get("attributes"))
        if name in scope:
            key += str(scope[name])
            continue
        records = scopes[0].get("logRecords") or []
        if records:
            first = _attributes(records[0].get("attributes"))
            if name in first:
                key += str(first[name])
    return key


@pytest.mark.parametrize("path", sorted(p.name for p in GOLDEN.glob("*.jsonl") if ".traces." not in p.name))
def test_each_run_routes_to_one_key(path: str) -> None:
    names = _routing_attributes()
    keys_by_run: dict[str, set[str]] = {}
    for doc in documents(GOLDEN / path):
        for original in doc.get("resourceLogs", []):
            resource_logs, aside = _run_records(original, names)
            unused = [read_log(v) for v in records_from_request({"resourceLogs": [{**original, "scopeLogs": [
                {"logRecords": aside}]}]})]
            assert all(o is None or o.kind == "other" for o in unused), "a record set aside is one a reader uses"
            if not resource_logs["scopeLogs"]:
                continue
            key = _key(resource_logs, names)
            for view in records_from_request({"resourceLogs": [resource_logs]}):
                observation = read_log(view)
                if observation is not None:
                    keys_by_run.setdefault(observation.run_key, set()).add(key)
    assert keys_by_run, "no run read from the capture"
    for run, keys in keys_by_run.items():
        assert len(keys) == 1 and "" not in keys, f"{run}: routed on {keys}"
