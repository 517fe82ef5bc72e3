"""What the sink Collector's files hold, counted as its Prometheus counters count it, and
those counters read from its /metrics: so that a test can check that every counter equals
the files (issue 28, item 1)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

EVENT = "gen_ai.evaluation.result"
DETECTION_EVENTS = ("no_progress", "livelock")
Key = tuple[str, ...]


def _value(v: dict[str, Any]) -> Any:
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in v:
            return v[key]
    if "intValue" in v:
        return int(v["intValue"])
    return v


def attrs(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {a["key"]: _value(a.get("value", {})) for a in items or ()}


def docs(path: Path) -> list[dict[str, Any]]:
    out = []
    for f in sorted(path.parent.glob(path.stem + "*")):
        for line in f.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line still being written
    return out


def _label(value: Any, default: str = "unknown") -> str:
    return default if value is None else str(value)


def _first(key: str, *maps: dict[str, Any]) -> Any:
    """The count connector's attribute lookup: record (event, span, …) before scope and
    resource."""
    for m in maps:
        if key in m:
            return m[key]
    return None


def file_counts(traces_file: Path, logs_file: Path, log_detections: bool = False) -> dict[str, Counter[Key]]:
    """Each counter's value per label set, computed from the sink's files; with
    ``log_detections`` (sink-logs.yaml) coding agents' ``progress.no_progress`` /
    ``progress.livelock`` records also count as detection events."""
    seen: Counter[Key] = Counter()
    detected: Counter[Key] = Counter()
    events: Counter[Key] = Counter()
    results: Counter[Key] = Counter()
    for doc in docs(traces_file):
        for rs in doc.get("resourceSpans", ()):
            res = attrs(rs.get("resource", {}).get("attributes"))
            service = _label(res.get("service.name"), "unknown_service")
            for ss in rs.get("scopeSpans", ()):
                scope = attrs(ss.get("scope", {}).get("attributes"))
                for span in ss.get("spans", ()):
                    sa = attrs(span.get("attributes"))
                    seen[(service, _label(_first("gen_ai.agent.name", sa, scope, res)))] += 1
                    if sa.get("progress.detected") is True:
                        detected[(service, _label(sa.get("progress.reason")), _label(sa.get("progress.level"), "0"),
                                  _label(sa.get("gen_ai.agent.name")))] += 1
                    for ev in span.get("events", ()):
                        if ev["name"] not in DETECTION_EVENTS:
                            continue
                        ea = {**attrs(ev.get("attributes")), "progress.event": ev["name"]}
                        events[(service, ev["name"],
                                *(_label(_first(k, ea, sa, scope, res), d) for k, d in (
                                    ("progress.reason", "unknown"), ("progress.level", "0"),
                                    ("progress.scope", "unknown"))))] += 1
    for doc in docs(logs_file):
        for rl in doc.get("resourceLogs", ()):
            res = attrs(rl.get("resource", {}).get("attributes"))
            service = _label(res.get("service.name"), "unknown_service")
            for sl in rl.get("scopeLogs", ()):
                scope = attrs(sl.get("scope", {}).get("attributes"))
                for rec in sl.get("logRecords", ()):
                    ra = attrs(rec.get("attributes"))
                    name = rec.get("eventName", "")
                    if log_detections and name in ("progress.no_progress", "progress.livelock"):
                        ea = {**ra, "progress.event": name.removeprefix("progress.")}
                        events[(service, *(_label(_first(k, ea, scope, res), d) for k, d in (
                            ("progress.event", "unknown"), ("progress.reason", "unknown"),
                            ("progress.level", "0"), ("progress.scope", "unknown"))))] += 1
                    is_event = rec.get("eventName") == EVENT or ra.get("event.name") == EVENT
                    if not is_event or ra.get("gen_ai.evaluation.name") not in (
                            "progress.no_progress", "progress.livelock"):
                        continue
                    results[(service, *(_label(_first(k, ra, scope, res), d) for k, d in (
                        ("progress.event", "unknown"), ("progress.reason", "unknown"),
                        ("progress.level", "0"), ("progress.scope", "unknown"))))] += 1
    return {"progress_spans_seen_total": seen, "progress_detected_spans_total": detected,
            "progress_detection_events_total": events, "progress_evaluation_results_total": results}


# The labels that identify a series of each counter (the others: job, instance, otel_scope_*).
LABELS = {
    "progress_spans_seen_total": ("service_name", "gen_ai_agent_name"),
    "progress_detected_spans_total": ("service_name", "progress_reason", "progress_level", "gen_ai_agent_name"),
    "progress_detection_events_total": ("service_name", "progress_event", "progress_reason", "progress_level",
                                        "progress_scope"),
    "progress_evaluation_results_total": ("service_name", "progress_event", "progress_reason", "progress_level",
                                          "progress_scope"),
}


def metric_counts(text: str) -> dict[str, Counter[Key]]:
    """Each counter's value per label set, from the sink's /metrics (Prometheus text)."""
    out: dict[str, Counter[Key]] = {name: Counter() for name in LABELS}
    for line in text.splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        head, _, value = line.rpartition(" ")
        name, _, label_text = head.partition("{")
        if name not in LABELS:
            continue
        labels = {}
        for part in label_text.rstrip("}").split('",'):
            key, _, val = part.partition("=")
            labels[key.strip(",")] = val.strip('"')
        out[name][tuple(labels.get(k, "") for k in LABELS[name])] += int(float(value))
    return out


def diff(want: dict[str, Counter[Key]], got: dict[str, Counter[Key]]) -> list[str]:
    lines = []
    for name in LABELS:
        for key in sorted(set(want[name]) | set(got[name])):
            if want[name][key] != got[name][key]:
                lines.append(f"{name}{key}: files {want[name][key]}, counter {got[name][key]}")
        lines.append(f"{name}: files {sum(want[name].values())}, counter {sum(got[name].values())} in all")
    return lines
