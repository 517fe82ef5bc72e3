"""One agent run of the JavaScript matrix: ``node agent.mjs <scenario>`` from a framework's
installed packages, exporting over OTLP to the pipeline (:mod:`.pipeline`), and how what
serve forwarded is judged; and ``otel-progress scan`` of what the agent sent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_progress.conventions.spans import SpanRecord
from tests._matrix.runs import DETECTION_EVENTS, OFFLINE_ENV, dump_output, environ_without, run_captured

from .envs import app_dir
from .pipeline import Exported, Pipeline, write_requests
from .rows import ROOT, Setup

__all__ = ["BASE_ENV", "DETECTION_EVENTS", "Run", "agent_env", "detection_events", "is_model_span", "is_tool_span",
           "node",
           "run_agent", "scan_detections", "scan_json"]

#: Environment of every agent run (a set-up's ``env`` on top): OTLP export to the pipeline,
#: and no way off the machine (:data:`tests._matrix.runs.OFFLINE_ENV`).
BASE_ENV = {
    "OTEL_TRACES_EXPORTER": "otlp",
    "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
    "OTEL_METRICS_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
    # One export per run, at shutdown: the OpenTelemetry JS SDK stamps a span's start with
    # Date.now() (milliseconds), so a model call and the tool call it made often start in the
    # same millisecond, and how such ties fall across a batch boundary decides which step a
    # call is counted in (FINDINGS.md); one batch makes serve's and scan's input the same.
    "OTEL_BSP_SCHEDULE_DELAY": "30000",
    **OFFLINE_ENV,
    "TRACELOOP_TELEMETRY": "false",
    "MASTRA_TELEMETRY_DISABLED": "1",
    "OPENAI_AGENTS_DISABLE_TRACING": "0",
    "OPENAI_API_KEY": "sk-scripted-model-never-called",
    "NODE_NO_WARNINGS": "1",
}
_DROPPED_ENV_PREFIXES = ("OTEL_", "PYTEST_", "NODE_OPTIONS", "NODE_PATH", "OPENAI_", "ANTHROPIC_", "GOOGLE_",
                         "GEMINI_", "AWS_", "TRACELOOP_", "PHOENIX_", "LANGCHAIN_", "LANGSMITH_", "MASTRA_")


@dataclass
class Run:
    """One agent run: its exit status, output, the spans it sent and the spans serve forwarded."""

    setup: Setup
    scenario: str
    service: str
    returncode: int
    stdout: str
    stderr: str
    exported: Exported
    seconds: float

    @property
    def annotated(self) -> list[SpanRecord]:
        return self.exported.annotated

    def tool_spans(self) -> list[SpanRecord]:
        return [s for s in self.annotated if is_tool_span(s)]

    def flagged(self) -> list[SpanRecord]:
        """Forwarded spans that carry a ``no_progress``/``livelock`` event or ``progress.detected``."""
        return [s for s in self.annotated if detection_events(s) or s.attributes.get("progress.detected")]

    def model_spans(self) -> list[SpanRecord]:
        return [s for s in self.annotated if is_model_span(s)]

    def served_detections(self, anywhere: bool = False) -> set[tuple[str, str]]:
        """``(span id, reason)`` of the detection events serve wrote on tool spans (``anywhere``:
        on any span, as issue 29's model scenarios need). Serve repeats an agent-scope
        detection's event on its run's agent span (docs/service.md); scan reports each
        detection once, on its own span, so a repeat (the same event on a span below) is
        not a detection of its own."""
        spans = self.annotated if anywhere else self.tool_spans()
        below = _events_below(self.annotated) if anywhere else {}
        return {(s.span_id, str(attrs.get("progress.reason"))) for s in spans
                for attrs in detection_events(s) if _frozen(attrs) not in below.get(s.span_id, ())}

    def summary(self, width: int = 160) -> str:
        lines = [f"{self.setup.id} {self.scenario} ({self.service}): exit {self.returncode}, "
                 f"{len(self.exported.raw)} spans sent, {len(self.annotated)} forwarded, "
                 f"{len(self.tool_spans())} tool spans, {len(self.model_spans())} model spans, {self.seconds:.1f} s"]
        for s in sorted(self.annotated, key=lambda s: s.start_ns):
            a = s.attributes
            marks = [f"{k}={a[k]}" for k in _MARK_KEYS if k in a]
            events = [f"{attrs.get('progress.reason')}@{attrs.get('progress.turn')}" for attrs in detection_events(s)]
            lines.append(f"  [{s.trace_id[-6:]}] {s.name!r} {' '.join(marks)} {' '.join(events)}"[:width])
        return "\n".join(lines)


_MARK_KEYS = ("ai.operationId", "gen_ai.operation.name", "openinference.span.kind", "traceloop.span.kind",
              "mastra.span.type")
_TOOL_MARKERS = (("ai.operationId", "ai.toolCall"), ("gen_ai.operation.name", "execute_tool"),
                 ("openinference.span.kind", "TOOL"), ("traceloop.span.kind", "tool"))


def is_tool_span(span: SpanRecord) -> bool:
    """Whether a span is a tool call by any instrumentation's own marker (the harness's
    own test, independent of otel-progress's readers)."""
    a = span.attributes
    return any(a.get(k) == v for k, v in _TOOL_MARKERS)


_MODEL_OPERATIONS = ("chat", "text_completion", "generate_content")
_MODEL_OPERATION_IDS = ("ai.generateText.doGenerate", "ai.streamText.doStream")


def is_model_span(span: SpanRecord) -> bool:
    """Whether a span is a model call (inference) by the instrumentations' own markers."""
    a = span.attributes
    return (a.get("gen_ai.operation.name") in _MODEL_OPERATIONS or a.get("ai.operationId") in _MODEL_OPERATION_IDS
            or a.get("openinference.span.kind") == "LLM" or a.get("traceloop.span.kind") == "llm")


def detection_events(span: SpanRecord) -> list[dict[str, Any]]:
    return [dict(attrs) for name, attrs in span.events if name in DETECTION_EVENTS]


def _frozen(attrs: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in attrs.items()))


def _events_below(spans: list[SpanRecord]) -> dict[str, set[tuple[tuple[str, str], ...]]]:
    """Span id -> the detection events on the spans below it (its descendants)."""
    parents = {s.span_id: s.parent_id for s in spans}
    below: dict[str, set[tuple[tuple[str, str], ...]]] = {}
    for s in spans:
        events = {_frozen(attrs) for attrs in detection_events(s)}
        if not events:
            continue
        seen: set[str] = set()
        parent = parents.get(s.span_id)
        while parent and parent not in seen:
            seen.add(parent)
            below.setdefault(parent, set()).update(events)
            parent = parents.get(parent)
    return below


def agent_env(setup: Setup, pipeline: Pipeline, service: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    env = environ_without(_DROPPED_ENV_PREFIXES, environ)
    env.update(BASE_ENV)
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = pipeline.otlp_http
    env["MATRIX_OTLP_GRPC_ENDPOINT"] = pipeline.otlp_grpc
    env["OTEL_SERVICE_NAME"] = service
    env.update(setup.env)
    return env


def node() -> str:
    found = shutil.which("node")
    if found is None:
        raise RuntimeError("node is not on PATH")
    return found


def run_agent(setup: Setup, scenario: str, env_dir: Path, pipeline: Pipeline, dump: Path | None = None) -> Run:
    """Run ``agent.mjs <scenario>`` of ``setup`` from its installed packages and collect
    what it exported."""
    service = f"matrix-js-{setup.framework}-{setup.name}-{scenario}-{uuid.uuid4().hex[:8]}"
    cwd = app_dir(env_dir, setup.framework)
    cmd = [node(), "agent.mjs", scenario, *setup.args]
    start = time.monotonic()
    code, out, err = run_captured(cmd, cwd=cwd, env=agent_env(setup, pipeline, service), timeout=setup.timeout)
    exported = pipeline.collect(service, timeout=30.0 if code == 0 else 3.0)
    run = Run(setup, scenario, service, code, out, err, exported, time.monotonic() - start)
    base = dump_output(dump, setup, scenario, out, err)
    if base is not None:
        write_requests(base.with_suffix(".raw.jsonl"), exported.raw_requests)
    return run


def scan_json(path: Path) -> tuple[int, list[dict[str, Any]], str]:
    """``otel-progress scan --format json`` of an OTLP/JSON file (this checkout's code): its
    exit status, its detections and its stderr."""
    proc = subprocess.run([sys.executable, "-m", "otel_progress.cli", "scan", "--format", "json", str(path)],
                          capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines() if line.strip()], proc.stderr


def scan_detections(run: Run, workdir: Path, anywhere: bool = False) -> tuple[set[tuple[str, str]], str]:
    """``otel-progress scan`` of the requests the agent sent (as the Collector's file
    exporter wrote them): ``(span id, reason)`` of its detections on the run's tool spans
    (``anywhere``: on any of its spans), and its stderr."""
    code, detections, stderr = scan_json(write_requests(workdir / f"{run.service}.jsonl", run.exported.raw_requests))
    if code not in (0, 1):
        raise RuntimeError(f"scan exited {code}: {stderr[-2000:]}")
    tools = {s.span_id for s in run.exported.raw if anywhere or is_tool_span(s)}
    return {(d["span_id"], str(d["reason"])) for d in detections if d.get("span_id") in tools}, stderr
