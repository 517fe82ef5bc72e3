"""The three drivers of the run model agree: the in-process processor (the spans replayed
through the OpenTelemetry SDK as they would start and end), the service (the spans as an
exporter sends them, in end order, split into requests by a 5 s and a 2 s export schedule
and in batches of 64) and scan give the same detections (reason, span, turn, level, scope)
on every run of the quality corpus and on the real runs of ``../shared/realtraces``."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from bench.quality.corpus import load_corpus
from bench.quality.otlp import build_trace
from bench.quality.ours import run_config_file
from otel_progress import Config, ProgressEngine
from otel_progress.otlp.files import any_value
from otel_progress.scan import scan_paths
from otel_progress.service.detector import BatchDetector
from tests.logs.conftest import b64_ids

REAL = Path(__file__).resolve().parents[3] / "shared" / "realtraces"
S = 1_000_000_000

Key = tuple[str, str, int, int, str]


def _key(d: Any) -> Key:
    return (d.reason.value, d.span_id, d.turn, int(d.level), d.scope.value)


def _spans(doc: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    for rs in doc["resourceSpans"]:
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                yield rs.get("resource", {}), ss.get("scope", {}), span


def _scan(doc: dict[str, Any], config: Config, tmp: Path) -> list[Key]:
    path = tmp / "trace.json"
    path.write_text(json.dumps(doc))
    return sorted(_key(d) for d in scan_paths([str(path)], config).detections)


def _processor(doc: dict[str, Any], config: Config) -> list[Key]:
    """Every span started and ended through the SDK at its own times, in time order."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

    from otel_progress import ProgressSpanProcessor

    found: list[Any] = []
    resource = next(_spans(doc))[0]
    provider = TracerProvider(resource=Resource.create({a["key"]: any_value(a["value"])
                                                        for a in resource.get("attributes", [])}))
    provider.add_span_processor(ProgressSpanProcessor(config=config, on_detection=found.append, analysis="inline"))
    tracer = provider.get_tracer("drivers")
    events = []
    for n, (_r, _s, span) in enumerate(_spans(doc)):
        events.append((int(span["startTimeUnixNano"]), 1, n, span))
        events.append((int(span["endTimeUnixNano"]), 0, n, span))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    live: dict[str, Any] = {}
    ours: dict[str, str] = {}
    for time_ns, is_start, _, span in events:
        sid = span["spanId"]
        if is_start:
            parent = live.get(span.get("parentSpanId", ""))
            attrs = {a["key"]: any_value(a["value"]) for a in span.get("attributes", [])}
            sdk = tracer.start_span(span["name"], context=set_span_in_context(parent) if parent is not None else None,
                                    kind=SpanKind.CLIENT if span.get("kind") == 3 else SpanKind.INTERNAL,
                                    attributes=attrs, start_time=time_ns)
            live[sid] = sdk
            ours[format(sdk.get_span_context().span_id, "016x")] = sid
        elif sid in live:
            sdk = live.pop(sid)
            status = span.get("status") or {}
            for event in span.get("events", []):
                sdk.add_event(event["name"], {a["key"]: any_value(a["value"]) for a in event.get("attributes", [])},
                              int(event["timeUnixNano"]))
            if status.get("code") == 2:
                sdk.set_status(Status(StatusCode.ERROR, status.get("message")))
            sdk.end(end_time=time_ns)
    provider.shutdown()
    return sorted((d.reason.value, ours.get(d.span_id, d.span_id), d.turn, int(d.level), d.scope.value)
                  for d in found)


def _requests(doc: dict[str, Any], split: str) -> Iterator[bytes]:
    """The trace as an exporter sends it: spans in end order, a request per export."""
    spans = sorted(_spans(doc), key=lambda t: int(t[2]["endTimeUnixNano"]))
    groups: list[list[Any]] = []
    if split == "whole":
        groups = [spans]
    elif split.endswith("s"):
        every = int(split[:-1]) * S
        edge = None
        for item in spans:
            end = int(item[2]["endTimeUnixNano"])
            if edge is None or end > edge:
                groups.append([])
                edge = end + every
            groups[-1].append(item)
    else:
        size = int(split)
        groups = [spans[i:i + size] for i in range(0, len(spans), size)]
    for group in groups:
        resource_spans = [{"resource": r, "scopeSpans": [{"scope": sc, "spans": [s]}]} for r, sc, s in group]
        yield json_format.ParseDict(b64_ids({"resourceSpans": resource_spans}), ExportTraceServiceRequest(),
                                    ignore_unknown_fields=True).SerializeToString()


def _service(doc: dict[str, Any], config: Config, split: str) -> list[Key]:
    detector = BatchDetector(ProgressEngine(config))
    found: list[Any] = []
    for raw in _requests(doc, split):
        found += detector.process(raw).new_detections
    found += detector.maintain(now=1e12)  # every trace closes: what its end brings
    return sorted(_key(d) for d in found)


def _check(name: str, doc: dict[str, Any], config: Config, tmp: Path) -> list[str]:
    scan = _scan(doc, config, tmp)
    out = []
    processor = _processor(doc, config)
    if processor != scan:
        out.append(f"{name}: processor {processor} != scan {scan}")
    for split in ("whole", "5s", "2s", "64"):
        service = _service(doc, config, split)
        if service != scan:
            out.append(f"{name}: service ({split}) {service} != scan {scan}")
    return out


@pytest.mark.parametrize("convention", ["genai", "openinference", "openllmetry"])
def test_the_drivers_agree_on_the_corpus(tmp_path: Path, convention: str) -> None:
    problems: list[str] = []
    detected = 0
    for run in load_corpus():
        config = Config.from_file(run_config_file(run, tmp_path), Config()) if run.config else Config()
        doc = build_trace(run, convention).document
        problems += _check(run.id, doc, config, tmp_path)
        detected += bool(_scan(doc, config, tmp_path))
    assert not problems, "\n".join(problems)
    assert detected >= 37  # the corpus's stuck runs are found (the comparison is not of empty sets)


def _real_documents() -> list[tuple[str, dict[str, Any]]]:
    files = sorted(p for p in REAL.glob("**/*.jsonl.gz") if not p.name.endswith(".steps.jsonl.gz"))
    out = []
    for path in files:
        with gzip.open(path, "rt") as fh:
            out += [(f"{path.name}:{n}", json.loads(line)) for n, line in enumerate(fh, 1) if line.strip()]
    return out


@pytest.mark.skipif(not REAL.is_dir(), reason="../shared/realtraces is not there")
def test_the_drivers_agree_on_the_real_runs(tmp_path: Path) -> None:
    docs = _real_documents()
    assert len(docs) >= 199
    problems: list[str] = []
    detected = 0
    for name, doc in docs:
        problems += _check(name, doc, Config(), tmp_path)
        detected += bool(_scan(doc, Config(), tmp_path))
    assert not problems, "\n".join(problems[:20])
    assert detected > 10
