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

from otel_progress.spans import SpanRecord

from .envs import app_dir
from .pipeline import Exported, Pipeline, write_requests
from .rows import ROOT, Setup

DETECTION_EVENTS = ("no_progress", "livelock")

#: Environment of every agent run (a set-up's ``env`` on top). The proxy variables point
#: every HTTP client that honours them at a closed local port, so a model call that escaped
#: the script fails at once instead of leaving the machine.
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
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
    "DO_NOT_TRACK": "1",
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

    def served_detections(self) -> set[tuple[str, str]]:
        """``(span id, reason)`` of the detection events serve wrote on tool spans."""
        return {(s.span_id, str(attrs.get("progress.reason"))) for s in self.tool_spans()
                for attrs in detection_events(s)}

    def summary(self, width: int = 160) -> str:
        lines = [f"{self.setup.id} {self.scenario} ({self.service}): exit {self.returncode}, "
                 f"{len(self.exported.raw)} spans sent, {len(self.annotated)} forwarded, "
                 f"{len(self.tool_spans())} tool spans, {self.seconds:.1f} s"]
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


def detection_events(span: SpanRecord) -> list[dict[str, Any]]:
    return [dict(attrs) for name, attrs in span.events if name in DETECTION_EVENTS]


def agent_env(setup: Setup, pipeline: Pipeline, service: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in (os.environ if environ is None else environ).items()
           if not k.startswith(_DROPPED_ENV_PREFIXES)}
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
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=agent_env(setup, pipeline, service), capture_output=True, text=True,
                              timeout=setup.timeout, check=False, stdin=subprocess.DEVNULL)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code = -1
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = (exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or ""))
        err += f"\n[harness] timed out after {setup.timeout} s"
    exported = pipeline.collect(service, timeout=30.0 if code == 0 else 3.0)
    run = Run(setup, scenario, service, code, out, err, exported, time.monotonic() - start)
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        base = dump / f"{setup.framework}-{setup.name}-{scenario}"
        base.with_suffix(".out").write_text(out)
        base.with_suffix(".err").write_text(err)
        write_requests(base.with_suffix(".raw.jsonl"), exported.raw_requests)
    return run


def scan_detections(run: Run, workdir: Path) -> tuple[set[tuple[str, str]], str]:
    """``otel-progress scan`` of the requests the agent sent (as the Collector's file
    exporter wrote them): ``(span id, reason)`` of its detections on the run's tool spans,
    and its stderr."""
    path = write_requests(workdir / f"{run.service}.jsonl", run.exported.raw_requests)
    proc = subprocess.run([sys.executable, "-m", "otel_progress.cli", "scan", "--format", "json", str(path)],
                          capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"scan exited {proc.returncode}: {proc.stderr[-2000:]}")
    tools = {s.span_id for s in run.exported.raw if is_tool_span(s)}
    found = set()
    for line in proc.stdout.splitlines():
        if line.strip():
            det = json.loads(line)
            if det.get("span_id") in tools:
                found.add((det["span_id"], str(det["reason"])))
    return found, proc.stderr

