"""The pipeline every JavaScript agent run exports to: the real Collector (built from
collector-config/builder.yaml) with ``collector.yaml`` beside this file, and a real
``otel-progress serve`` in inline mode between its two pipelines. What the agents sent is
in the Collector's ``file/raw`` output, what serve forwarded (annotated) in
``file/annotated``; a run's spans are told apart by their resource's ``service.name``."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_progress.conventions.spans import SpanRecord
from otel_progress.otlp.files import ReadProblem, iter_documents, spans_from_request
from tests.e2e.conftest import Procs
from tests.service.helpers import free_port, http_get, wait_until

from .rows import ROOT

CONFIG = Path(__file__).with_name("collector.yaml")


class PipelineError(RuntimeError):
    """The Collector or serve did not start, or a run's spans never arrived."""


def _documents(path: Path) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    with open(path, "rb") as fh:
        for item in iter_documents(fh, str(path)):
            if isinstance(item, ReadProblem):
                continue  # the line being written
            yield item[1]


def _service(resource_spans: dict[str, Any]) -> str | None:
    for kv in (resource_spans.get("resource") or {}).get("attributes") or ():
        if kv.get("key") == "service.name":
            return (kv.get("value") or {}).get("stringValue")
    return None


def requests_of(path: Path, service: str) -> list[dict[str, Any]]:
    """The ``ExportTraceServiceRequest`` documents of ``path`` cut down to the resource
    spans of ``service``."""
    out = []
    for doc in _documents(path):
        kept = [rs for rs in doc.get("resourceSpans") or () if _service(rs) == service]
        if kept:
            out.append({"resourceSpans": kept})
    return out


def spans_of(requests: list[dict[str, Any]]) -> list[SpanRecord]:
    out: list[SpanRecord] = []
    for doc in requests:
        out.extend(spans_from_request(doc))
    return out


@dataclass
class Exported:
    """What one run exported: the requests as the agent sent them and the spans serve forwarded."""

    raw_requests: list[dict[str, Any]]
    raw: list[SpanRecord]
    annotated: list[SpanRecord]


class Pipeline:
    """The Collector and serve, started once per test session."""

    def __init__(self, otelcol: str, workdir: Path) -> None:
        self.workdir = workdir
        self.procs = Procs(workdir)
        self.ports = {n: free_port() for n in ("grpc", "http", "annotated", "health", "serve", "serve_health")}
        self.raw_file = workdir / "raw.jsonl"
        self.annotated_file = workdir / "annotated.jsonl"
        self._otelcol = otelcol

    @property
    def otlp_http(self) -> str:
        return f"http://127.0.0.1:{self.ports['http']}"

    @property
    def otlp_grpc(self) -> str:
        return f"http://127.0.0.1:{self.ports['grpc']}"

    def start(self) -> None:
        p = self.ports
        self.procs.start("serve", [sys.executable, "-m", "otel_progress.cli", "serve"], env={
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "OTEL_PROGRESS_SERVE_LISTEN": f"127.0.0.1:{p['serve']}",
            "OTEL_PROGRESS_SERVE_HEALTH_LISTEN": f"127.0.0.1:{p['serve_health']}",
            "OTEL_PROGRESS_SERVE_FORWARD_ENDPOINT": f"127.0.0.1:{p['annotated']}",
        })
        self.procs.start("collector", [self._otelcol, "--config", str(CONFIG)], env={
            "JS_MATRIX_OTLP_GRPC": f"127.0.0.1:{p['grpc']}",
            "JS_MATRIX_OTLP_HTTP": f"127.0.0.1:{p['http']}",
            "JS_MATRIX_ANNOTATED_GRPC": f"127.0.0.1:{p['annotated']}",
            "JS_MATRIX_HEALTH": f"127.0.0.1:{p['health']}",
            "JS_MATRIX_SERVE": f"127.0.0.1:{p['serve']}",
            "JS_MATRIX_RAW_FILE": str(self.raw_file),
            "JS_MATRIX_ANNOTATED_FILE": str(self.annotated_file),
        })
        checks = (("collector", lambda: http_get(f"http://127.0.0.1:{p['health']}/")[0] == 200),
                  ("serve", lambda: http_get(f"http://127.0.0.1:{p['serve_health']}/readyz")[0] == 200))
        for name, ready in checks:
            if not wait_until(ready, 60, 0.2):
                self.stop()
                raise PipelineError(f"{name} did not become ready within 60 s:\n{self.logs()}")

    def logs(self, tail: int = 40) -> str:
        return "\n".join(f"--- {n}\n{self.procs.log(n, tail)}" for n in ("collector", "serve"))

    def stop(self) -> None:
        self.procs.stop_all()

    def collect(self, service: str, timeout: float = 30.0, settle: float = 0.8) -> Exported:
        """The spans of the run whose resource is ``service``: waits until what the agent
        sent has all been forwarded by serve and nothing new came for ``settle`` seconds."""
        deadline = time.monotonic() + timeout
        last: tuple[int, int] | None = None
        stable_since = time.monotonic()
        while True:
            raw_requests = requests_of(self.raw_file, service)
            raw, annotated = spans_of(raw_requests), spans_of(requests_of(self.annotated_file, service))
            state = (len(raw), len(annotated))
            complete = raw and {s.span_id for s in raw} <= {s.span_id for s in annotated}
            if state != last:
                last, stable_since = state, time.monotonic()
            elif complete and time.monotonic() - stable_since >= settle:
                return Exported(raw_requests, raw, annotated)
            if time.monotonic() > deadline:  # incomplete or nothing: judged (and explained) by the test
                return Exported(raw_requests, raw, annotated)
            time.sleep(0.2)


def write_requests(path: Path, requests: list[dict[str, Any]]) -> Path:
    """Requests as the Collector's file exporter writes them (one per line)."""
    path.write_text("".join(json.dumps(r) + "\n" for r in requests))
    return path
