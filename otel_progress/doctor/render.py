"""The doctor's human-readable output."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from .checks import ERROR, WARNING, content_statuses

if TYPE_CHECKING:
    from . import DoctorReport

__all__ = ["render_text"]

_STATUS = {"loads": "ok", "skipped": "skipped", "disabled": "disabled", "import_error": "error",
           "raises": "RAISES", "not_reached": "not run"}


def _instrumentors(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return ["  (none installed)"]
    width = max(len(str(r.get("name"))) for r in rows)
    out = []
    for r in rows:
        dist = f"{r.get('distribution') or '?'} {r.get('version') or ''}".strip()
        detail = f"  {r['detail']}" if r.get("detail") else ""
        status = _STATUS.get(r.get("status", ""), r.get("status"))
        out.append(f"  {status:<8} {r.get('name')!s:<{width}}  {dist}{detail}")
    return out


def _run(report: DoctorReport) -> list[str]:
    run = report.run
    cmd = shlex.join(report.command or [])
    status = "timed out" if report.returncode is None else f"exit {report.returncode}"
    out = [f"Run: {cmd} ({status})"]
    if run is None:
        out.append("  no report from the run")
        return out
    proc = run.get("processor") or {}
    if proc.get("installed"):
        wraps = ", ".join(proc.get("wraps") or ()) or "nothing"
        out.append(f"  progress processor: installed, analysis {proc.get('analysis')}, wraps {wraps}")
    else:
        out.append("  progress processor: NOT installed")
    loaded = ", ".join(run.get("instrumented") or ()) or "none"
    out.append(f"  instrumentors active: {loaded}")
    out.append(f"  spans: {run.get('spans', 0)}; tool spans: {run.get('tool_spans', 0)}, with arguments:"
               f" {run.get('tool_spans_with_arguments', 0)}, with a result: {run.get('tool_spans_with_result', 0)},"
               f" annotated: {run.get('tool_spans_annotated', 0)}")
    if run.get("model_spans"):
        out.append(f"  inference spans: {run['model_spans']}, with the model's output:"
                   f" {run.get('model_spans_with_output', 0)}")
    if run.get("export_failures"):
        out.append(f"  exporters failed to send: {run['export_failures']} time(s) (see the findings)")
    names: dict[str, int] = {}
    for t in run.get("tools") or ():
        names[str(t.get("tool"))] = names.get(str(t.get("tool")), 0) + 1
    if names:
        out.append("  tools called: " + ", ".join(f"{k} x{v}" for k, v in names.items()))
    detections = run.get("detections") or ()
    out.append(f"  detections: {len(detections)}")
    for d in detections[:10]:
        out.append(f"    {d.get('event', '?')} {d.get('reason', '?')} at turn {d.get('turn', '?')}, level"
                   f" {d.get('level', '?')}, tool {d.get('tool', '?')} (agent {d.get('agent') or '-'})")
    if len(detections) > 10:
        out.append(f"    ... and {len(detections) - 10} more")
    return out


def render_text(report: DoctorReport) -> str:
    """The report as a person reads it."""
    probe = report.probe
    lines = ["otel-progress doctor", ""]
    lines.append(f"Python: {probe.get('python') or '?'} {probe.get('python_version') or ''}".rstrip())
    if probe.get("error"):
        lines.append(f"  cannot examine this interpreter: {probe['error']}")
    else:
        lines.append(f"opentelemetry-instrument: {probe.get('opentelemetry_instrument') or 'NOT FOUND'}")
        export = probe.get("export")
        if isinstance(export, dict):
            state = "ok" if export.get("ok") else "FAILED"
            lines.append(f"Span export: {state}, {export.get('exporter')} to {export.get('endpoint')}"
                         " (an empty batch sent as a check)")
        lines += ["", "Instrumentors, in the order opentelemetry-instrument loads them:"]
        lines += _instrumentors(list(probe.get("instrumentors") or ()))
        lines += ["", "Content capture (arguments and results on the tool spans):"]
        statuses = content_statuses(probe)
        for s in statuses:
            lines.append(f"  {s.capture.value:<8} {s.instrumentation}: {s.detail}")
        if not statuses:
            lines.append("  no instrumentation otel-progress knows the content settings of is installed")
        progress = probe.get("progress") or {}
        lines += ["", "otel-progress settings:"]
        for k, v in (progress.get("settings") or {}).items():
            lines.append(f"  {k}={v}")
        if not progress.get("settings"):
            lines.append("  none set (defaults)")
    if report.coding_agents:
        lines += ["", "Coding agents (their own telemetry, see docs/coding-agents.md):"]
        for a in report.coding_agents:
            lines.append(f"  {a.level:<9} {a.agent}: {a.detail}")
            lines.append(f"            at this level: {a.lost}")
            if a.compaction:
                lines.append(f"            compactions: {a.compaction}")
            if a.fix:
                lines.append(f"            for more: {a.fix}")
    if report.command is not None:
        lines += ["", *_run(report)]
    lines += ["", "Findings:"]
    if not report.findings:
        lines.append("  none: every check passed")
    for f in report.findings:
        lines.append(f"  {f.severity}: {f.message}")
        if f.fix:
            lines.append(f"      fix: {f.fix}")
    problems = sum(f.severity in (ERROR, WARNING) for f in report.findings)
    lines += ["", f"{problems} problem(s) found; exit status {report.exit_status}", ""]
    return "\n".join(lines)
