"""otel-progress behind the scoreboard's detector interface, through the paths users use.

:class:`ScanDetector` writes each run's OTLP/JSON trace in one span convention and runs
``otel-progress scan --format json [--config FILE] FILE...`` as a subprocess (one
invocation per distinct run config), then maps each detection's span id back to the
corpus turn. :class:`ProcessorDetector` replays the same trace through the OpenTelemetry
SDK with :class:`otel_progress.ProgressSpanProcessor` and collects detections from its
``on_detection`` hook. A run-scope detection sits on the sub-agent span whose end
revealed it; it maps to the last turn of that sub-agent invocation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .baselines.base import Alarm, Detector
from .corpus import Run
from .otlp import CONVENTIONS, GeneratedTrace, build_trace, write_traces

__all__ = ["ProcessorDetector", "ScanDetector", "processor_available", "run_config_file"]

_LABELS = {"genai": "OTel GenAI", "openinference": "OpenInference", "openllmetry": "OpenLLMetry"}


def run_config_file(run: Run, directory: Path) -> str | None:
    """Write the run's otel-progress config (if any) as JSON; its path."""
    if not run.config:
        return None
    text = json.dumps(run.config, sort_keys=True)
    path = directory / f"config-{abs(hash(text)) % 10**12:012d}.json"
    if not path.exists():
        path.write_text(text, encoding="utf-8")
    return str(path)


def _earliest(found: dict[str, Alarm], run_id: str, alarm: Alarm) -> None:
    current = found.get(run_id)
    if current is None or alarm.turn < current.turn:
        found[run_id] = alarm


def _detail(d: Mapping[str, Any]) -> str:
    level = d.get("level")
    return f"{d.get('reason')} (level {level})"


class ScanDetector(Detector):
    """otel-progress through ``otel-progress scan`` over generated OTLP/JSON files."""

    name = "otel-progress-scan"
    source = "otel-progress scan (the command users run on exported traces)"

    def __init__(self, convention: str = "genai", workdir: str | Path | None = None,
                 command: Sequence[str] | None = None) -> None:
        if convention not in CONVENTIONS:
            raise ValueError(f"unknown convention {convention!r}")
        self.convention = convention
        self.workdir = Path(workdir) if workdir is not None else None
        self.command = list(command) if command else [sys.executable, "-m", "otel_progress.cli"]
        self.title = f"**otel-progress** (scan, {_LABELS[convention]})"
        self.last_stderr = ""
        self.reports: list[dict[str, Any]] = []

    def first_alarm(self, run: Run) -> Alarm | None:
        return self.evaluate([run])[run.id]

    def evaluate(self, runs: Sequence[Run]) -> dict[str, Alarm | None]:
        if self.workdir is None:
            with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
                return self._evaluate(runs, Path(tmp))
        return self._evaluate(runs, self.workdir)

    def _evaluate(self, runs: Sequence[Run], root: Path) -> dict[str, Alarm | None]:
        directory = root / self.convention
        traces = write_traces(runs, self.convention, directory)
        by_trace = {t.trace_id: t for t in traces.values()}
        groups: dict[str | None, list[Run]] = {}
        for run in runs:
            groups.setdefault(run_config_file(run, root), []).append(run)
        found: dict[str, Alarm] = {}
        env = dict(os.environ)
        for key in [k for k in env if k.startswith("OTEL_PROGRESS_")]:
            del env[key]  # the scoreboard measures the defaults (plus the run's config file)
        for config, members in groups.items():
            cmd = [*self.command, "scan", "--format", "json", "--no-progress"]
            if config:
                cmd += ["--config", config]
            cmd += [str(directory / f"{r.id}.json") for r in members]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if proc.returncode not in (0, 1):
                raise RuntimeError(f"otel-progress scan failed ({proc.returncode}): {proc.stderr.strip()}")
            self.last_stderr += proc.stderr
            for line in proc.stdout.splitlines():
                if not line.strip():
                    continue
                det = json.loads(line)
                trace = by_trace.get(det["trace_id"])
                if trace is None:
                    continue
                turn = trace.turn_of(det["span_id"])
                if turn is None:
                    continue
                self.reports.append({**det, "run": trace.run_id, "corpus_turn": turn})
                _earliest(found, trace.run_id, Alarm(turn, _detail(det)))
        return {run.id: found.get(run.id) for run in runs}


def processor_available() -> bool:
    """Whether ``otel_progress.ProgressSpanProcessor`` can be imported."""
    try:
        from otel_progress import ProgressSpanProcessor  # noqa: F401
    except (ImportError, AttributeError):
        return False
    return True


def _replay(trace: GeneratedTrace, config: Any) -> list[tuple[str, Any]]:
    """Replay one generated trace through the SDK with the processor; the detections, with
    the generated span id each SDK span stands for."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

    from otel_progress import ProgressSpanProcessor
    from otel_progress.otlp.files import any_value

    detections: list[Any] = []
    processor = ProgressSpanProcessor(config=config, on_detection=detections.append)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench.quality")
    spans = trace.document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    events: list[tuple[int, int, int, dict[str, Any]]] = []
    for n, span in enumerate(spans):
        start, end = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
        events.append((start, 1, n, span))
        # At one instant ends come before starts (siblings do not overlap), except the end
        # of a span that lasted no time at all, which must follow its own start.
        events.append((end, 0 if end > start else 2, n, span))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    live: dict[str, Any] = {}
    sdk_to_ours: dict[str, str] = {}
    for time_ns, order, _, span in events:
        sid = span["spanId"]
        if order == 1:
            parent = live.get(span.get("parentSpanId", ""))
            context = set_span_in_context(parent) if parent is not None else None
            attrs = {a["key"]: any_value(a["value"]) for a in span.get("attributes", [])}
            kind = SpanKind.CLIENT if span.get("kind") == 3 else SpanKind.INTERNAL
            sdk_span = tracer.start_span(span["name"], context=context, kind=kind, attributes=attrs,
                                         start_time=time_ns)
            live[sid] = sdk_span
            sdk_to_ours[format(sdk_span.get_span_context().span_id, "016x")] = sid
        else:
            sdk_span = live.pop(sid)
            status = span.get("status") or {}
            if status.get("code") == 2:
                for event in span.get("events", []):
                    attrs = {a["key"]: any_value(a["value"]) for a in event.get("attributes", [])}
                    sdk_span.add_event(event["name"], attrs, int(event["timeUnixNano"]))
                sdk_span.set_status(Status(StatusCode.ERROR, status.get("message")))
            sdk_span.end(end_time=time_ns)
    provider.shutdown()
    return [(sdk_to_ours.get(d.span_id, ""), d) for d in detections]


class ProcessorDetector(Detector):
    """otel-progress in process: the SDK with ``ProgressSpanProcessor``."""

    name = "otel-progress-processor"
    source = "otel_progress.ProgressSpanProcessor (the in-process path)"

    def __init__(self, convention: str = "genai") -> None:
        self.convention = convention
        self.title = f"**otel-progress** (processor, {_LABELS[convention]})"

    def first_alarm(self, run: Run) -> Alarm | None:
        from otel_progress import Config

        config = Config()
        if run.config:
            with tempfile.TemporaryDirectory() as tmp:
                path = run_config_file(run, Path(tmp))
                assert path is not None
                config = Config.from_file(path, config)
        trace = build_trace(run, self.convention)
        best: Alarm | None = None
        for ours, det in _replay(trace, config):
            turn = trace.turn_of(ours)
            if turn is None:
                continue
            if best is None or turn < best.turn:
                best = Alarm(turn, f"{det.reason.value} (level {int(det.level)})")
        return best
