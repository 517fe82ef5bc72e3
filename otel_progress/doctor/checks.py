"""What the doctor concludes: :class:`Finding` objects from the environment probe's data
(:mod:`.probe`) and from a watched run's report (:mod:`.watch`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..conventions.content_settings import SETTINGS, Capture, ContentStatus, advice_for_span, evaluate
from .export import exporter_entry_point

__all__ = ["ERROR", "INFO", "WARNING", "Finding", "content_statuses", "environment_findings", "model_output_findings",
           "run_findings"]

ERROR = "error"      # nothing (or almost nothing) can be detected
WARNING = "warning"  # detection is degraded, or something the user expects is not loaded
INFO = "info"


@dataclass(frozen=True, slots=True)
class Finding:
    """One conclusion: ``severity`` (``error``, ``warning``, ``info``), the ``topic``
    (``instrumentors``, ``sdk``, ``export``, ``content``, ``processor``, ``run``), what was found, and
    what to do about it (may be empty)."""

    severity: str
    topic: str
    message: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


_GENAI_UTIL = "opentelemetry-util-genai"


def content_statuses(probe: Mapping[str, Any]) -> list[ContentStatus]:
    """The content settings in effect for the instrumentations installed.
    ``opentelemetry-util-genai`` counts only when an installed distribution requires it
    (an instrumentation built on it): installed alone (a test dependency, a leftover) its
    setting concerns no span."""
    distributions = dict(probe.get("distributions") or {})
    users = probe.get("genai_util_users")
    if _GENAI_UTIL in distributions and isinstance(users, list) and not users:
        del distributions[_GENAI_UTIL]
    return evaluate(probe.get("environment") or {}, distributions)


def _sdk_findings(probe: Mapping[str, Any], cli_signals: frozenset[str] = frozenset()) -> list[Finding]:
    env = probe.get("environment") or {}
    out: list[Finding] = []
    if not probe.get("opentelemetry_instrument"):
        out.append(Finding(ERROR, "sdk", "opentelemetry-instrument is not installed for this interpreter",
                           "pip install opentelemetry-instrumentation"))
    if not probe.get("configurators"):
        out.append(Finding(ERROR, "sdk", "no OpenTelemetry configurator is installed: opentelemetry-instrument"
                           " will not set up the SDK, so no span is recorded", "pip install opentelemetry-distro"))
    if str(env.get("OTEL_SDK_DISABLED", "")).strip().lower() == "true":
        out.append(Finding(ERROR, "sdk", "OTEL_SDK_DISABLED=true: the SDK records nothing", "unset OTEL_SDK_DISABLED"))
    exporters = probe.get("exporters") or {}
    for signal in ("traces", "metrics", "logs"):
        var = f"OTEL_{signal.upper()}_EXPORTER"
        raw = str(env.get(var, "")).strip()
        names = [n.strip() for n in (raw or "otlp").split(",") if n.strip()]
        if names == ["none"]:
            if signal == "traces":
                out.append(Finding(WARNING, "sdk", f"{var}=none: spans are not exported, so the annotations reach"
                                   " no backend (only the metrics and an on_detection hook)"))
            continue
        known = set(exporters.get(signal) or ())
        missing = [n for n in names if n != "none" and exporter_entry_point(n, signal, env) not in known]
        if missing:
            if signal in cli_signals:
                # A coding CLI reads the same variable for its own export: setting it to none
                # would switch that telemetry, and with it the detection, off.
                fix = (f"install it (pip install opentelemetry-exporter-otlp) in this Python environment; keep"
                       f" {var}={raw or 'otlp'}: a coding CLI configured here reads it too, and none would"
                       " switch its telemetry off")
            else:
                fix = (f"install it (opentelemetry-exporter-otlp for otlp) or set {var}="
                       f"{'console' if signal == 'traces' else 'none'}")
            out.append(Finding(ERROR, "sdk", f"{var}{'' if raw else ' (default otlp)'}: no {signal} exporter"
                               f" {', '.join(missing)} is installed, so the SDK set-up fails and nothing is"
                               " instrumented", fix))
    return out


def _export_findings(probe: Mapping[str, Any]) -> list[Finding]:
    """The check export of :mod:`.export` failed: the agent's spans reach no backend."""
    check = probe.get("export")
    if not isinstance(check, Mapping) or check.get("ok"):
        return []
    endpoint = check.get("endpoint") or "?"
    return [Finding(
        ERROR, "export",
        f"the span exporter ({check.get('exporter')}) could not send to {endpoint}: {check.get('error') or 'failed'}."
        " Every span, with the progress annotations, is lost (the agent's output shows the exporter's errors)",
        f"start the Collector or backend that listens at {endpoint}, or point OTEL_EXPORTER_OTLP_ENDPOINT (or"
        " OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and OTEL_EXPORTER_OTLP_PROTOCOL at the one you run; check its"
        " headers and TLS settings (OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_INSECURE,"
        " OTEL_EXPORTER_OTLP_CERTIFICATE); OTEL_TRACES_EXPORTER=console prints the spans without a backend")]


def _instrumentor_findings(probe: Mapping[str, Any]) -> list[Finding]:
    rows: Sequence[Mapping[str, Any]] = probe.get("instrumentors") or ()
    out: list[Finding] = []
    progress = [r for r in rows if r.get("name") == "progress"]
    if not progress:
        out.append(Finding(ERROR, "processor", "the `progress` instrumentor entry point is not installed in this"
                           " interpreter: opentelemetry-instrument will not add the progress processor",
                           "pip install otel-progress into the agent's environment"))
    for row in rows:
        name, status, detail = row.get("name"), row.get("status"), row.get("detail", "")
        label = f"{name} ({row.get('distribution')} {row.get('version')})"
        if status == "raises":
            after = [r["name"] for r in rows if r.get("status") == "not_reached"]
            tail = f"; not loaded after it: {', '.join(after)}" if after else ""
            out.append(Finding(ERROR, "instrumentors", f"{label} {detail}{tail}",
                               f"fix or uninstall {row.get('distribution')}, or add {name} to"
                               " OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"))
        elif status == "import_error":
            out.append(Finding(WARNING, "instrumentors", f"{label}: {detail}"))
        elif status == "skipped":
            out.append(Finding(WARNING, "instrumentors", f"{label} is installed but {detail}",
                               "install the library it instruments (its `instruments` requirement), or"
                               " uninstall it"))
        elif status == "disabled" and name == "progress":
            out.append(Finding(ERROR, "processor", "the progress instrumentor is disabled by"
                               " OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "remove `progress` from it"))
        elif status == "not_reached" and name == "progress":
            out.append(Finding(ERROR, "processor", f"the progress instrumentor is never loaded: {detail}"))
    return out


def _progress_findings(probe: Mapping[str, Any]) -> list[Finding]:
    progress = probe.get("progress") or {}
    out: list[Finding] = []
    if progress.get("error"):
        out.append(Finding(ERROR, "processor", f"otel-progress settings are invalid: {progress['error']}",
                           "fix the setting named"))
    return out


def _content_findings(statuses: Sequence[ContentStatus]) -> list[Finding]:
    # Only settings the environment controls are findings here; an installed library whose
    # spans never carry content (the MCP SDK, a dependency of many frameworks) is one only
    # when a watched run shows its tool spans without content.
    by_env = {s.instrumentation for s in SETTINGS if s.variables}
    out: list[Finding] = []
    for s in statuses:
        if s.instrumentation not in by_env:
            continue
        if s.capture is Capture.NO or (s.capture is Capture.DEPENDS and s.fix):
            out.append(Finding(WARNING, "content", f"{s.instrumentation}: {s.detail}", s.fix))
    return out


def environment_findings(probe: Mapping[str, Any], cli_signals: frozenset[str] = frozenset()) -> list[Finding]:
    """Everything wrong with the environment the probe examined (``cli_signals``: the
    signals, ``traces`` / ``metrics`` / ``logs``, whose ``OTEL_*_EXPORTER`` variable a
    configured coding CLI also reads: the fix never tells to set those to ``none``)."""
    if probe.get("error"):
        return [Finding(ERROR, "sdk", f"the environment could not be examined: {probe['error']}")]
    return (_sdk_findings(probe, cli_signals) + _export_findings(probe) + _instrumentor_findings(probe)
            + _progress_findings(probe)
            + _content_findings(content_statuses(probe)))


def _run_export_findings(report: Mapping[str, Any]) -> list[Finding]:
    """The run's exporters said they failed to send (the watcher counts their lines)."""
    failures = int(report.get("export_failures") or 0)
    if not failures:
        return []
    said = "; ".join(str(e) for e in report.get("export_errors") or ()) or "no detail"
    return [Finding(ERROR, "export", f"the run's exporters failed to send {failures} time(s): {said}. What they"
                    " could not send (spans with the progress annotations, or the detections' log records and"
                    " metrics) is lost",
                    "make the endpoint named reachable from the agent (start the Collector or backend there, or"
                    " point OTEL_EXPORTER_OTLP_ENDPOINT, or the endpoint the agent sets in code, at the one you"
                    " run); check its headers and TLS settings")]


def model_output_findings(report: Mapping[str, Any], environ: Mapping[str, str]) -> list[Finding]:
    """Inference spans were recorded but none carried the model's output (text, reasoning,
    requested tool calls): content capture is off for them, as it can be for tool spans,
    and the model-side signals (``text_repeat``, ``unexecuted_repeat``) stay silent. The
    fix names the instrumentation's setting (:func:`advice_for_span`)."""
    models = int(report.get("model_spans") or 0)
    if models == 0 or int(report.get("model_spans_with_output") or 0) > 0:
        return []
    first = report.get("model_bare") if isinstance(report.get("model_bare"), Mapping) else {}
    advice = advice_for_span(first.get("markers") or {}, environ, str(first.get("scope") or ""))
    return [Finding(WARNING, "content", f"{models} inference span(s) were recorded (first: {first.get('name')!r})"
                    " but none carried the model's output (text, reasoning or requested tool calls): content"
                    f" capture is off for them, so repeated answers and requests that never run cannot be"
                    f" detected. {advice}")]


def run_findings(report: Mapping[str, Any] | None, returncode: int | None, environ: Mapping[str, str]) -> list[Finding]:
    """What a watched run showed (``report`` None: the run wrote none)."""
    out: list[Finding] = []
    if returncode not in (0, None):
        out.append(Finding(WARNING, "run", f"the command exited with status {returncode}"))
    if report is None:
        out.append(Finding(ERROR, "run", "the run sent no report: the progress instrumentor did not load in it"
                           " (see the findings above), or the process was killed before it exited",
                           "run the command as `opentelemetry-instrument python ...` in the environment where"
                           " otel-progress is installed"))
        return out
    processor = report.get("processor") or {}
    if not processor.get("installed"):
        out.append(Finding(ERROR, "processor", "the progress processor was not installed in the run"))
    elif not processor.get("wraps") and str(environ.get("OTEL_TRACES_EXPORTER", "")).strip() != "none":
        out.append(Finding(WARNING, "processor", "the progress processor wraps no exporting span processor: the"
                           " tool spans are annotated only where the SDK lets _on_ending modify them; the agent"
                           " span still carries the events"))
    for error in report.get("errors") or ():
        out.append(Finding(WARNING, "run", error))
    out += _run_export_findings(report)
    out += model_output_findings(report, environ)
    spans, tools = int(report.get("spans") or 0), int(report.get("tool_spans") or 0)
    if spans == 0:
        out.append(Finding(ERROR, "run", "no span was recorded: the framework is not instrumented, or it writes"
                           " to its own tracer provider", "check the instrumentors above"))
        return out
    if tools == 0:
        scopes = ", ".join(sorted(s or "(no scope)" for s in (report.get("scopes") or {}))) or "-"
        out.append(Finding(ERROR, "run", f"{spans} spans were recorded but none is a tool call in a convention"
                           f" otel-progress reads (instrumentation scopes: {scopes})",
                           "install an instrumentation that writes tool spans (see docs/doctor.md)"))
        return out
    rows: Sequence[Mapping[str, Any]] = report.get("tools") or ()
    bare = [r for r in rows if not r.get("arguments") and not r.get("result")]
    with_content = tools - len(bare) if len(rows) == tools else (int(report.get("tool_spans_with_result") or 0))
    if bare:
        first = bare[0]
        advice = advice_for_span(first.get("markers") or {}, environ, str(first.get("scope") or ""))
        severity = ERROR if with_content == 0 else WARNING
        out.append(Finding(severity, "content", f"{len(bare)} of {tools} tool spans carried no arguments or"
                           f" result (first: {first.get('name')!r}); without content only recurring errors can be"
                           f" detected. {advice}"))
    return out
