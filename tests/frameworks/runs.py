"""One agent run of the matrix: ``opentelemetry-instrument python agent.py <scenario>`` in
a set-up's virtualenv, its environment, and how its exported spans are judged."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests._matrix.runs import DETECTION_EVENTS, OFFLINE_ENV, dump_output, environ_without, run_captured
from tests.otel_console import console_spans

from .rows import Setup
from .venvs import source_path

__all__ = ["BASE_ENV", "DETECTION_EVENTS", "Run", "agent_env", "detection_events", "is_model_span", "is_tool_span",
           "run_agent"]

#: Environment of every agent run (a set-up's ``env`` is applied on top): console export,
#: and no way off the machine (:data:`tests._matrix.runs.OFFLINE_ENV`).
BASE_ENV = {
    "OTEL_TRACES_EXPORTER": "console",
    "OTEL_METRICS_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
    "OTEL_BSP_SCHEDULE_DELAY": "200",
    **OFFLINE_ENV,
    "ANONYMIZED_TELEMETRY": "false",
    "TRACELOOP_TELEMETRY": "false",
    "CREWAI_DISABLE_TELEMETRY": "true",
    "HF_HUB_OFFLINE": "1",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
#: Variables of the test process that never reach an agent run.
_DROPPED_ENV_PREFIXES = ("OTEL_", "PYTEST_", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "OPENAI_", "ANTHROPIC_",
                         "GOOGLE_", "GEMINI_", "AWS_", "TRACELOOP_", "PHOENIX_", "LOGFIRE_")


@dataclass
class Run:
    """One agent run: its exit status, output and the spans it exported."""

    setup: Setup
    scenario: str
    returncode: int
    stdout: str
    stderr: str
    spans: list[dict[str, Any]]
    seconds: float

    def tool_spans(self) -> list[dict[str, Any]]:
        extra = re.compile(self.setup.tool_span_names) if self.setup.tool_span_names else None
        return [s for s in self.spans if is_tool_span(s) or (extra is not None and extra.search(s["name"]))]

    def model_spans(self) -> list[dict[str, Any]]:
        return [s for s in self.spans if is_model_span(s)]

    def reasons(self) -> set[str]:
        """The ``progress.reason`` of every detection event of the run."""
        return {str((e.get("attributes") or {}).get("progress.reason")) for s in self.spans
                for e in detection_events(s)}

    def flagged(self) -> list[dict[str, Any]]:
        """Spans that carry a ``no_progress``/``livelock`` event or ``progress.detected``."""
        return [s for s in self.spans if detection_events(s) or (s.get("attributes") or {}).get("progress.detected")]

    def crashes(self) -> list[str]:
        """Tracebacks in stderr that pass through otel-progress's code."""
        blocks = re.split(r"(?=^Traceback \(most recent call last\):)", self.stderr, flags=re.M)
        return [b[:4000] for b in blocks if b.startswith("Traceback") and "otel_progress" in b]

    def summary(self, width: int = 160) -> str:
        """One line per span: name, kind markers, progress events, a few content keys."""
        lines = [f"{self.setup.id} {self.scenario}: exit {self.returncode}, {len(self.spans)} spans, "
                 f"{len(self.tool_spans())} tool spans, {len(self.model_spans())} model spans, {self.seconds:.1f} s"]
        for s in sorted(self.spans, key=lambda s: s.get("start_time") or ""):
            attrs = s.get("attributes") or {}
            marks = [f"{k}={attrs[k]}" for k in ("gen_ai.operation.name", "openinference.span.kind",
                                                   "traceloop.span.kind", "mcp.method.name") if k in attrs]
            events = [f"{e['name']}({(e.get('attributes') or {}).get('progress.reason')})" for e in detection_events(s)]
            trace = (s.get("context") or {}).get("trace_id", "")[-6:]
            line = f"  [{trace}] {s['name']!r} {' '.join(marks)} {' '.join(events)}"
            lines.append(line[:width])
        return "\n".join(lines)


_TOOL_MARKERS = (("gen_ai.operation.name", "execute_tool"), ("openinference.span.kind", "TOOL"),
                 ("traceloop.span.kind", "tool"), ("mcp.method.name", "tools/call"))


def is_tool_span(span: dict[str, Any]) -> bool:
    """Whether a span is a tool call by any of the conventions' markers (the harness's own
    test, independent of otel-progress's readers). LlamaIndex under OpenLLMetry marks every
    step ``task``; its agents' ``call_tool`` step is the one that names the tool."""
    attrs = span.get("attributes") or {}
    return any(attrs.get(k) == v for k, v in _TOOL_MARKERS) or (
        "tool.name" in attrs and attrs.get("traceloop.span.kind") == "task")


_MODEL_OPERATIONS = ("chat", "text_completion", "generate_content")


def is_model_span(span: dict[str, Any]) -> bool:
    """Whether a span is a model call (inference) by the conventions' markers."""
    attrs = span.get("attributes") or {}
    return (attrs.get("gen_ai.operation.name") in _MODEL_OPERATIONS or attrs.get("openinference.span.kind") == "LLM"
            or attrs.get("traceloop.span.kind") == "llm" or attrs.get("llm.request.type") == "chat")


def detection_events(span: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in span.get("events") or () if e.get("name") in DETECTION_EVENTS]


def agent_env(setup: Setup, environ: dict[str, str] | None = None) -> dict[str, str]:
    env = environ_without(_DROPPED_ENV_PREFIXES, environ)
    env.update(BASE_ENV)
    env["OTEL_SERVICE_NAME"] = f"matrix-{setup.framework}-{setup.name}"
    env.update(setup.env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(source_path()), setup.env.get("PYTHONPATH", "")) if p)
    return env


def run_agent(setup: Setup, scenario: str, venv: Path, dump: Path | None = None) -> Run:
    """Run ``agent.py <scenario>`` of ``setup`` under ``opentelemetry-instrument`` in ``venv``."""
    cmd = [str(venv / "bin" / "opentelemetry-instrument"), str(venv / "bin" / "python"), "agent.py", scenario,
           *setup.args]
    start = time.monotonic()
    code, out, err = run_captured(cmd, cwd=setup.directory, env=agent_env(setup), timeout=setup.timeout)
    run = Run(setup, scenario, code, out, err, console_spans(out), time.monotonic() - start)
    dump_output(dump, setup, scenario, out, err)
    return run
