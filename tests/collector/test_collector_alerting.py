"""collector-config/alerting/: Prometheus rules (promtool), Grafana, TraceQL, LogQL (Loki
rules), Honeycomb."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from .conftest import CONFIG_DIR

ALERTING = CONFIG_DIR / "alerting"
RULES = ALERTING / "prometheus-rules.yaml"
RULES_TEST = ALERTING / "prometheus-rules.test.yaml"
GRAFANA_DASHBOARD = ALERTING / "grafana-dashboard.json"
GRAFANA_RULES = ALERTING / "grafana-alert-rules.yaml"
TRACEQL = ALERTING / "traceql.md"
LOGQL = ALERTING / "logql.md"
LOKI_RULES = ALERTING / "loki-rules.yaml"
HONEYCOMB_DIR = ALERTING / "honeycomb"

# Metric names the sink exposes (see the smoke test), the in-process processor's,
# and Collector self-metrics.  Rules/dashboards must not reference anything else.
SINK_METRICS = {
    "progress_detection_events_total",
    "progress_detected_spans_total",
    "progress_spans_seen_total",
    "progress_evaluation_results_total",
}
IN_PROCESS_METRICS = {
    "progress_detections_total",
    "progress_wasted_turns_total",
    "progress_wasted_tokens_total",
}
SERVICE_METRICS = {  # otel-progress serve's own, pushed to the sink (docs/service.md)
    "progress_service_log_records_received_total",
    "progress_service_log_records_read_total",
}
OTHER_METRICS = {"up", "ALERTS"}
SELF_METRIC_PREFIX = "otelcol_"
PROMQL_WORDS = {
    "sum", "by", "without", "rate", "increase", "irate", "unless", "or", "and", "offset", "on",
    "ignoring", "group_left", "group_right", "max", "min", "avg", "count", "topk", "bottomk",
    "histogram_quantile", "clamp_min", "clamp_max", "vector", "scalar", "absent", "bool",
    "count_over_time", "sum_over_time", "max_over_time", "label_replace", "time", "delta",
}  # fmt: skip


def _run(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=cwd, check=False)


def _recording_rule_names() -> set[str]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}


def _metric_names(expr: str) -> set[str]:
    """Identifiers in a PromQL expression that look like metric names."""
    stripped = re.sub(r"\{[^}]*\}", "", expr)  # drop label matchers
    stripped = re.sub(r'"[^"]*"', "", stripped)
    stripped = re.sub(r"\[[^\]]*\]", "", stripped)  # drop ranges
    stripped = re.sub(r"\b\d+(?:\.\d+)?(?:ms|[smhdwy])?\b", "", stripped)  # numbers, durations
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", stripped):
        word = m.group(0)
        after = stripped[m.end() : m.end() + 1]
        if word in PROMQL_WORDS or after == "(":
            continue
        names.add(word)
    # by (...) / without (...) label lists
    for grp in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", stripped):
        names -= {x.strip() for x in grp.split(",")}
    return names


def _assert_known_metrics(expr: str, where: str) -> None:
    known = SINK_METRICS | IN_PROCESS_METRICS | SERVICE_METRICS | OTHER_METRICS | _recording_rule_names()
    for name in _metric_names(expr):
        if name.startswith(SELF_METRIC_PREFIX):
            continue
        assert name in known, f"{where}: unknown metric {name!r} in {expr!r}"


def _promql_check(promtool: str, exprs: dict[str, str], tmp_path: Path) -> None:
    """Parse PromQL by wrapping each expression as a recording rule for promtool."""
    rules = {
        "groups": [
            {
                "name": "promql-syntax-check",
                "rules": [{"record": f"check:{i}", "expr": e} for i, e in enumerate(exprs.values())],
            }
        ]
    }
    path = tmp_path / "exprs.rules.yaml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    proc = _run([promtool, "check", "rules", str(path)])
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\nexpressions: {json.dumps(exprs, indent=1)}"


# --------------------------------------------------------------------------- Prometheus


def test_promtool_check_rules(promtool: str) -> None:
    proc = _run([promtool, "check", "rules", str(RULES)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_promtool_test_rules(promtool: str) -> None:
    proc = _run([promtool, "test", "rules", RULES_TEST.name], cwd=ALERTING)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rules_reference_known_metrics() -> None:
    doc = yaml.safe_load(RULES.read_text())
    alerts = set()
    for group in doc["groups"]:
        for rule in group["rules"]:
            _assert_known_metrics(rule["expr"], rule.get("alert") or rule.get("record"))
            if "alert" in rule:
                alerts.add(rule["alert"])
                assert rule["labels"]["severity"] in {"info", "warning", "critical"}
                assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    # The three the project asked for, at least.
    assert {"OtelProgressNoProgressDetected", "OtelProgressAgentParked", "OtelProgressHighDetectionRatio"} <= alerts
    # Every alert has a promtool unit test.
    tests = yaml.safe_load(RULES_TEST.read_text())
    tested = {
        case["alertname"] for t in tests["tests"] for case in t.get("alert_rule_test", []) if case.get("exp_alerts")
    }
    assert alerts <= tested, f"alerts without a firing unit test: {alerts - tested}"


# --------------------------------------------------------------------------- Grafana


def _grafana_prometheus_queries(rules_doc: dict) -> dict[str, str]:
    out = {}
    for group in rules_doc["groups"]:
        for rule in group["rules"]:
            for q in rule["data"]:
                if q.get("datasourceUid") != "__expr__" and "expr" in q["model"]:
                    out[f"{rule['uid']}/{q['refId']}"] = q["model"]["expr"]
    return out


def test_grafana_alert_rules(promtool: str, tmp_path: Path) -> None:
    doc = yaml.safe_load(GRAFANA_RULES.read_text())
    assert doc["apiVersion"] == 1
    uids = set()
    for group in doc["groups"]:
        assert {"orgId", "name", "folder", "interval", "rules"} <= set(group)
        for rule in group["rules"]:
            assert rule["uid"] not in uids
            uids.add(rule["uid"])
            refs = {q["refId"] for q in rule["data"]}
            assert rule["condition"] in refs, rule["uid"]
            for q in rule["data"]:
                if q.get("datasourceUid") == "__expr__":
                    expr_ref = q["model"].get("expression")
                    assert expr_ref in refs, f"{rule['uid']}: expression refers to {expr_ref}"
    queries = _grafana_prometheus_queries(doc)
    assert queries
    for where, expr in queries.items():
        _assert_known_metrics(expr, where)
    _promql_check(promtool, queries, tmp_path)


def _dashboard_targets(dash: dict) -> list[dict]:
    targets = []
    for panel in dash["panels"]:
        for sub in [panel, *panel.get("panels", [])]:
            targets += sub.get("targets", [])
    return targets


def test_grafana_dashboard(promtool: str, tmp_path: Path) -> None:
    dash = json.loads(GRAFANA_DASHBOARD.read_text())
    assert dash["uid"] and dash["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    var_names = {v["name"] for v in dash.get("templating", {}).get("list", [])}
    prom, traceql = {}, []
    for t in _dashboard_targets(dash):
        if "expr" in t:
            expr = t["expr"]
            # Grafana macros and dashboard variables -> something promtool can parse.
            expr = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m").replace("$__range", "1h")
            for var in re.findall(r"\$\{?(\w+)", expr):
                assert var in var_names, f"dashboard query uses undefined variable ${var}"
            expr = re.sub(r"\$\{?(\w+)(?::\w+)?\}?", ".*", expr)
            prom[f"{t.get('refId')}:{len(prom)}"] = expr
        elif t.get("queryType") == "traceql" or "query" in t:
            traceql.append(t["query"])
    assert prom, "no Prometheus queries in the dashboard"
    for where, expr in prom.items():
        _assert_known_metrics(expr, where)
    _promql_check(promtool, prom, tmp_path)
    assert any('event:name = "no_progress"' in q for q in traceql), traceql


# --------------------------------------------------------------------------- TraceQL + Honeycomb


def test_traceql_doc() -> None:
    text = TRACEQL.read_text()
    for q in (
        '{ event:name = "no_progress" }',
        '{ event:name = "livelock" }',
        "{ span.progress.detected = true }",
        "{ span.progress.level = 3 }",
    ):
        assert q in text, q


def test_honeycomb_trigger_specs() -> None:
    specs = sorted(HONEYCOMB_DIR.glob("*.json"))
    assert specs, "no Honeycomb query/trigger JSON"
    for path in specs:
        doc = json.loads(path.read_text())
        trigger = doc
        query = trigger["query"]
        calcs = [c for c in query["calculations"]]
        assert len(calcs) == 1, f"{path.name}: a trigger query has exactly one calculation"
        assert trigger["frequency"] % 60 == 0 and 60 <= trigger["frequency"] <= 86400
        assert query["time_range"] <= 4 * trigger["frequency"], path.name
        assert trigger["threshold"]["op"] in {">", ">=", "<", "<="}
        assert trigger["alert_type"] in {"on_change", "on_true"}
        cols = {f["column"] for f in query.get("filters", [])}
        assert cols & {"progress.detected", "name", "progress.level", "gen_ai.evaluation.name"}, path.name


def test_honeycomb_terraform() -> None:
    tf = (HONEYCOMB_DIR / "triggers.tf").read_text()
    assert 'source  = "honeycombio/honeycombio"' in tf
    assert tf.count("{") == tf.count("}"), "unbalanced braces"
    assert 'resource "honeycombio_trigger"' in tf
    assert 'data "honeycombio_query_specification"' in tf
    for needle in ('"progress.detected"', '"no_progress"', '"progress.level"', '"gen_ai.evaluation.name"'):
        assert needle in tf, needle
    # every trigger JSON has its Terraform twin
    assert tf.count('resource "honeycombio_trigger"') == len(list(HONEYCOMB_DIR.glob("trigger-*.json")))


def test_alerts_on_the_detection_log_records() -> None:
    """The log records (gen_ai.evaluation.result) are alerted on three ways: Prometheus through
    the count connector (progress:detected:increase5m, tested by promtool above), Loki, and
    Honeycomb. The end-to-end test evaluates the LogQL on real records."""
    rules = yaml.safe_load(RULES.read_text())
    by_name = {r.get("alert") or r.get("record"): r for g in rules["groups"] for r in g["rules"]}
    assert "progress_evaluation_results_total" in by_name["progress:evaluation_results:increase5m"]["expr"]
    for alert in ("OtelProgressNoProgressDetected", "OtelProgressAgentParked"):
        assert "progress:detected:increase5m" in by_name[alert]["expr"]
    loki = yaml.safe_load(LOKI_RULES.read_text())
    alerts = {r["alert"]: r for g in loki["groups"] for r in g["rules"]}
    assert set(alerts) == {"OtelProgressNoProgressDetected", "OtelProgressAgentParked"}
    for name, rule in alerts.items():
        prom = by_name[name]
        assert rule["labels"] == prom["labels"], name  # the same alert for Alertmanager
        expr = rule["expr"]
        assert 'event_name="gen_ai.evaluation.result"' in expr and 'gen_ai_evaluation_name=~"progress[.].+"' in expr
        assert "count_over_time({" in expr and "[5m]" in expr
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    text = LOGQL.read_text()
    assert 'gen_ai_evaluation_name=~"progress[.].+"' in text and "trace_id=" in text


@pytest.mark.parametrize("path", sorted(p.name for p in ALERTING.glob("*.yaml")))
def test_alerting_yaml_parses(path: str) -> None:
    assert yaml.safe_load((ALERTING / path).read_text())
