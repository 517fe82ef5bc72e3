"""``otel-progress demo``: scripted agents through the real SDK with the processor.

The agents are the seed documents' traces: a deploy agent polling a build (healthy: the
manifest says the poll is a wait), a docs agent rephrasing a search that keeps returning
nothing, a code-fixing agent editing and reverting the same line, a reconciliation
planner revisiting ``verify_totals`` with nothing new, a planner and an extractor lapping
a loop between them, and a healthy research agent. Each emits OpenTelemetry GenAI spans
(``invoke_agent``, ``chat``, ``execute_tool`` with content) through a real
``TracerProvider``; spans carry simulated timestamps so that waits and intervals are
those of the seeds. The processor wraps a ``BatchSpanProcessor`` writing OTLP/JSON to a
file (:class:`~otel_progress.otlp.exporter.OtlpJsonFileExporter`; and an OTLP exporter
when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set); the demo prints what was detected on which
span and the nudge a harness would have sent, and writes the settings it used beside the
file with the ``otel-progress scan`` command that reproduces it. No server needed.

Its files go to :func:`default_output` (under the user's cache directory, never the
current directory, so that running the demo in a checkout leaves nothing untracked)
unless ``--output`` says otherwise. Every agent invocation is a run (planner-2 invokes
extractor-2 four times: five runs in one trace), as ``scan`` counts them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Span, StatusCode, Tracer

from .engine.config import Config
from .engine.manifest import parse_manifest
from .model import Detection
from .otlp.exporter import OtlpJsonFileExporter

__all__ = [
    "DEMO_MANIFEST",
    "SCENARIOS",
    "OtlpJsonFileExporter",
    "Scenario",
    "ScriptedAgent",
    "default_output",
    "reproduce_command",
    "run_demo",
    "settings_file_for",
    "settings_mapping",
    "write_settings",
]

#: The deploy agent's manifest entry, from seed 000.
DEMO_MANIFEST: list[dict[str, Any]] = [
    {
        "name": "get_build_status",
        "kind": "wait",
        "progress_field": "status",
        "waiting_values": ["queued", "running"],
        "terminal_values": ["success", "failed", "cancelled", "timed_out"],
        "max_wait_seconds": 1200,
        "min_interval_seconds": 5,
    },
    {"name": "edit_file", "kind": "write"},
]

_NS = 1_000_000_000


# -- scripted agents ------------------------------------------------------------------------


class ScriptedAgent:
    """Emits one agent's GenAI spans with a simulated clock (seconds since its start)."""

    def __init__(self, tracer: Tracer, start_ns: int | None = None) -> None:
        self.tracer = tracer
        self.now = start_ns if start_ns is not None else time.time_ns()
        self.nudges: list[Detection] = []
        self.invocations: list[str] = []  # the agent of each invoke_agent span: one run each

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * _NS)

    @contextlib.contextmanager
    def agent(self, name: str, **attributes: Any) -> Iterator[Span]:
        self.invocations.append(name)
        span = self.tracer.start_span(
            f"invoke_agent {name}", start_time=self.now,
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name,
                        "gen_ai.provider.name": "openai", **attributes},
        )
        with trace.use_span(span, end_on_exit=False):
            yield span
        self.advance(0.1)
        span.end(end_time=self.now)

    @contextlib.contextmanager
    def node(self, name: str) -> Iterator[Span]:
        """A plan-node span (a graph step) between the agent and its calls."""
        span = self.tracer.start_span(name, start_time=self.now)
        with trace.use_span(span, end_on_exit=False):
            yield span
        span.end(end_time=self.now)

    def chat(self, input_tokens: int, output_tokens: int, seconds: float = 2.0) -> None:
        span = self.tracer.start_span(
            "chat gpt-4o", start_time=self.now,
            attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"},
        )
        self.advance(seconds)
        span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
        span.end(end_time=self.now)

    def tool(self, name: str, arguments: Any, result: Any = None, *, error: str | None = None,
             seconds: float = 1.0, **attributes: Any) -> None:
        span = self.tracer.start_span(
            f"execute_tool {name}", start_time=self.now,
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name},
        )
        self.advance(seconds)
        span.set_attribute("gen_ai.tool.call.arguments", json.dumps(arguments))
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(StatusCode.ERROR, f"{error}: {name} failed")
        else:
            span.set_attribute("gen_ai.tool.call.result", result if isinstance(result, str) else json.dumps(result))
        for key, value in attributes.items():
            span.set_attribute(key.replace("__", "."), value)
        span.end(end_time=self.now)


@dataclass
class Scenario:
    """One scripted agent of the demo: one trace. ``seed`` names the seed document the
    scenario comes from (for the project's developers; not printed); ``runs`` is filled in
    when it ran: the agent of each invocation, in order."""

    agent: str
    story: str
    expect_detection: bool
    run: Callable[[ScriptedAgent], None]
    seed: str = ""
    detections: list[Detection] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)


def _deploy(a: ScriptedAgent) -> None:
    statuses = (["queued"] + [f"running {n}/4" for n in (1, 1, 2, 2, 3, 3, 3)] + ["success"])
    with a.agent("deploy-agent"):
        for status in statuses:
            a.chat(1800, 120)
            state, _, jobs = status.partition(" ")
            result = {"build_id": "b_88231", "status": state}
            if jobs:
                result["jobs"] = jobs
            a.tool("get_build_status", {"build_id": "b_88231"}, result)
            a.advance(30)
        a.chat(1900, 150)
        a.tool("merge_pr", {"pr": 88}, {"merged": True, "sha": "9f2c1e7"})
        a.chat(2000, 300)


def _docs(a: ScriptedAgent) -> None:
    queries = ["refund policy", "refund policy annual plans", "annual plan refund rules",
               "what is the refund policy for annual subscriptions", "refunds yearly subscription",
               "annual subscription cancellation refund", "refund terms annual billing",
               "money back annual plan", "refund eligibility yearly"]
    with a.agent("docs-agent"):
        for q in queries:
            a.chat(8100, 90)
            a.tool("search_docs", {"q": q}, {"results": [], "total": 0})


def _code_fix(a: ScriptedAgent) -> None:
    tree = {"null-check": "tree:4be1", "default-arg": "tree:77c0", "base": "tree:0000"}
    edits = [("add null check at line 40", "null-check"), ("revert null check, change default arg", "default-arg")]
    with a.agent("fixer-agent"):
        a.chat(5400, 300)
        a.tool("run_tests", {"target": "tests/test_export.py"},
               {"failed": ["test_export_handles_empty_rows"], "passed": 41},
               progress__state=tree["base"])
        for i in range(8):
            change, state = edits[i % 2]
            a.chat(5400, 300)
            a.tool("edit_file", {"path": "src/exporter.py", "change": change},
                   {"ok": True, "tree": tree[state]}, progress__state=tree[state])
            a.chat(5400, 200)
            a.tool("run_tests", {"target": "tests/test_export.py"},
                   {"failed": ["test_export_handles_empty_rows"], "passed": 41},
                   progress__state=tree[state])


def _planner(a: ScriptedAgent) -> None:
    with a.agent("planner-1", **{"gen_ai.conversation.id": "run_9402"}):
        for version in ("v2", "v3", "v3", "v3", "v3", "v3"):
            with a.node("verify_totals"):
                a.chat(9000, 200)
                a.tool("compute_totals", {"ledger": "acme-2026-02"},
                       {"match": False, "mismatch": "4102.50"})
                a.chat(9000, 200)
                a.tool("fetch_statement", {"vendor": "acme", "version": version},
                       {"vendor": "acme", "version": version, "lines": 212, "total": "18230.00"})
            a.advance(120)


def _lap(a: ScriptedAgent) -> None:
    with a.agent("planner-2"):
        for lap in range(4):
            with a.node("collect_clauses"):
                a.chat(6000, 200)
                with a.agent("extractor-2"):
                    a.chat(4000, 150)
                    a.tool("extract_clause_table", {"doc": "msa-acme.pdf", "pages": "12-19"},
                           {"clauses": [], "note": "text layer empty; re-OCR pages 12-19"})
                a.chat(6000, 200)
                a.tool("reocr_pages", {"doc": "msa-acme.pdf", "pages": "12-19", "attempt": lap + 1},
                       {"doc": "msa-acme.pdf", "pages": "12-19", "artifact": "ocr:msa-acme:v1"})


def _research(a: ScriptedAgent) -> None:
    with a.agent("research-agent"):
        for i in range(8):
            a.chat(2700, 300)
            a.tool("read_file", {"path": f"src/mod_{i}.py"}, f"# module {i}\ndef f{i}(): return {i}\n")
        a.chat(3000, 800)


SCENARIOS: list[Scenario] = [
    Scenario("deploy-agent", "polls get_build_status until the build succeeds, then merges",
             False, _deploy, "seed 000"),
    Scenario("docs-agent", "rephrases a docs search that keeps returning nothing", True, _docs, "seed 000"),
    Scenario("fixer-agent", "edits and reverts the same fix while the same test fails", True, _code_fix,
             "seeds 000, 004"),
    Scenario("planner-1", "re-enters verify_totals with nothing new (reconciliation run_9402)", True,
             _planner, "seed 003"),
    Scenario("planner-2", "laps with extractor-2: empty clause table, re-OCR, ask again", True, _lap,
             "seed 003"),
    Scenario("research-agent", "reads eight different files and answers", False, _research),
]


# -- the command -----------------------------------------------------------------------------


def _otlp_exporter(out: TextIO) -> SpanExporter | None:
    """An OTLP exporter when ``OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT`` is set, if installed."""
    if not (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return None
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc").strip().lower()
    try:
        if protocol.startswith("http"):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

            return Http()  # type: ignore[no-any-return]
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        return Grpc()  # type: ignore[no-any-return]
    except ImportError:
        package = "opentelemetry-exporter-otlp-proto-http" if protocol.startswith("http") else \
            "opentelemetry-exporter-otlp-proto-grpc"
        out.write(f"note: OTEL_EXPORTER_OTLP_ENDPOINT is set but {package} is not installed;"
                  " writing the file only\n")
        return None


def _short(text: str, width: int = 100) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines


def default_output() -> str:
    """Where the demo writes its spans by default:
    ``${OTEL_PROGRESS_CACHE:-~/.cache/otel-progress}/demo/otel-progress-demo.jsonl`` (the
    directory is created when missing)."""
    root = os.environ.get("OTEL_PROGRESS_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "otel-progress")
    return os.path.join(root, "demo", "otel-progress-demo.jsonl")


def run_demo(
    output: str | None = None,
    *,
    stdout: TextIO | None = None,
    scenarios: Sequence[Scenario] | None = None,
    config: Config | None = None,
) -> int:
    """Run the scripted agents and print what was detected; returns the exit status (0;
    2 when ``output`` cannot be written). ``output`` None: no file."""
    out = stdout or sys.stdout
    chosen = list(scenarios) if scenarios is not None else [
        Scenario(s.agent, s.story, s.expect_detection, s.run, s.seed) for s in SCENARIOS
    ]
    config = _demo_config(config)
    exporters: list[SpanExporter] = []
    settings_path = None
    if output:
        settings_path = _file_exporter(output, config, exporters)
        if settings_path is None:
            return 2
    otlp = _otlp_exporter(out)
    if otlp is not None:
        exporters.append(otlp)
    demo = _DemoTelemetry(exporters, config)
    demo.write_header(out, len(chosen))
    demo.run(chosen)
    for scenario in chosen:
        _write_scenario(out, scenario, demo.span_names)
    _write_metrics(out, demo.reader)
    wrong = [s.agent for s in chosen if bool(s.detections) != s.expect_detection]
    demo.shutdown()
    _write_summary(out, chosen, wrong)
    if output and settings_path:
        out.write(f"spans written to {output} (OTLP/JSON), the settings used to {settings_path};"
                  " this reproduces the detections above:\n"
                  f"  {reproduce_command(output, settings_path)}\n")
    if otlp is not None:
        out.write("spans also sent to the OTLP endpoint in OTEL_EXPORTER_OTLP_ENDPOINT\n")
    out.flush()
    return 0


def _demo_config(config: Config | None) -> Config:
    """``config``, else the environment's, with the demo's manifest where it has none."""
    if config is None:
        config = Config.from_env()
        if not config.manifest:
            config = config.replace(manifest=parse_manifest(DEMO_MANIFEST, "demo manifest"))
    return config


def _file_exporter(output: str, config: Config, exporters: list[SpanExporter]) -> str | None:
    """Add the exporter to the file ``output`` to ``exporters`` and write the settings
    beside it; returns the settings file's path, or None (said on stderr) when either
    cannot be written."""
    from .scan import writable

    settings_path = settings_file_for(output)
    if output == default_output():
        with contextlib.suppress(OSError):  # a failure is reported just below
            os.makedirs(os.path.dirname(output), exist_ok=True)
    for path in (output, settings_path):
        why = writable(path)
        if why is not None:
            sys.stderr.write(f"otel-progress demo: cannot write {why}\n")
            return None
    try:
        if os.path.exists(output):
            os.remove(output)
        exporters.append(OtlpJsonFileExporter(output))
        write_settings(config, settings_path)
    except OSError as exc:
        sys.stderr.write(f"otel-progress demo: cannot write {output}: {exc.strerror or exc}\n")
        return None
    return settings_path


class _DemoTelemetry:
    """The demo's SDK set-up: a tracer provider with the progress processor around a
    batch processor per exporter, an in-memory metric reader, the detections collected
    per scenario and the names of the exported spans."""

    def __init__(self, exporters: Sequence[SpanExporter], config: Config) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        from .processor import ProgressSpanProcessor

        self.current: list[Scenario] = []
        self.span_names: dict[str, str] = {}
        names = self.span_names

        class _Names(BatchSpanProcessor):
            def on_end(self, span: ReadableSpan) -> None:
                names[format(span.context.span_id, "016x")] = span.name
                super().on_end(span)

        self.reader = InMemoryMetricReader()
        self.meters = MeterProvider(metric_readers=[self.reader])
        self.provider = TracerProvider(sampler=ALWAYS_ON,
                                       resource=Resource.create({"service.name": "otel-progress-demo"}))
        inner = [_Names(e, schedule_delay_millis=200) for e in exporters] or [_Names(_Discard())]
        self.processor = ProgressSpanProcessor(inner, config=config, on_detection=self._hook,
                                               meter_provider=self.meters)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("otel_progress.demo")

    def _hook(self, det: Detection) -> None:
        if self.current:
            self.current[0].detections.append(det)

    def write_header(self, out: TextIO, count: int) -> None:
        """The first lines: how many agents, the SDK version, where tool spans are annotated."""
        import opentelemetry.sdk

        sdk_version = getattr(opentelemetry.sdk, "__version__", None) or _dist_version("opentelemetry-sdk")
        route = "in _on_ending" if self.processor.annotates_in_on_ending else "on a copy handed to the exporter"
        out.write(f"otel-progress demo: {count} scripted agents, OpenTelemetry SDK {sdk_version},\n"
                  f"ProgressSpanProcessor(BatchSpanProcessor(...)); tool spans annotated {route}.\n\n")

    def run(self, chosen: Sequence[Scenario]) -> None:
        """Run each scenario's agent (its detections and runs are kept on it), then flush."""
        for scenario in chosen:
            self.current[:] = [scenario]
            agent = ScriptedAgent(self.tracer)
            scenario.run(agent)
            scenario.runs = list(agent.invocations)
        self.current.clear()
        self.provider.force_flush()

    def shutdown(self) -> None:
        self.provider.shutdown()
        self.meters.shutdown()


def _write_scenario(out: TextIO, scenario: Scenario, spans: Mapping[str, str]) -> None:
    """A scenario's verdict and each detection: where, what, the nudge and handoff texts."""
    verdict = "DETECTED" if scenario.detections else "healthy, left alone"
    out.write(f"{scenario.agent:<15} {scenario.story}\n{'':<15} -> {verdict}{_runs_note(scenario.runs)}\n")
    for det in scenario.detections:
        figures = " ".join(f"{k}={v}" for k, v in det.figures.items())
        where = spans.get(det.span_id, "?")
        out.write(f"{'':<18}turn {det.turn}: {det.event} reason={det.reason.value} level={int(det.level)}"
                  f" ({det.level.action}) scope={det.scope.value} {figures}\n")
        out.write(f"{'':<18}on span '{where}' {det.span_id} and on its run's agent span\n")
        label = {"nudge": "nudge", "restart": "nudge with restart", "park": "nudge with park"}[det.level.action]
        out.write(f"{'':<18}{label}:\n")
        for text in _short(det.nudge, 86):
            out.write(f"{'':<20}{text}\n")
        if det.level.action != "nudge":
            whom = "for the fresh run" if det.level.action == "restart" else "for the reviewer"
            out.write(f"{'':<18}handoff note ({whom}):\n")
            for text in det.handoff.splitlines():
                for piece in _short(text, 86):
                    out.write(f"{'':<20}{piece}\n")
    out.write("\n")


def _write_metrics(out: TextIO, reader: Any) -> None:
    """The progress.* metrics the run recorded."""
    totals = _metric_totals(reader)
    if totals:
        out.write("metrics (progress.*, from the OpenTelemetry metrics API):\n")
        for name, value in totals:
            out.write(f"  {name} {value}\n")
        out.write("\n")


def _write_summary(out: TextIO, chosen: Sequence[Scenario], wrong: Sequence[str]) -> None:
    """Detections, traces and runs in all; the scenarios whose outcome was not the expected one."""
    found = sum(len(s.detections) for s in chosen)
    runs = sum(len(s.runs) for s in chosen)
    out.write(f"{found} detections in {sum(1 for s in chosen if s.detections)} of {len(chosen)} traces"
              f" ({runs} runs: each agent invocation is a run, as scan counts them);"
              f" healthy agents left alone: {sum(1 for s in chosen if not s.expect_detection and not s.detections)}"
              f" of {sum(1 for s in chosen if not s.expect_detection)}.\n")
    if wrong:
        out.write(f"unexpected outcome for: {', '.join(wrong)}\n")


def _runs_note(runs: Sequence[str]) -> str:
    """`` (5 runs: planner-2, and extractor-2 invoked 4 times)`` for a trace of several runs."""
    if len(runs) < 2:
        return ""
    counts: dict[str, int] = {}
    for name in runs[1:]:
        counts[name] = counts.get(name, 0) + 1
    invoked = ", ".join(f"{name} invoked {n} time{'s' if n > 1 else ''}" for name, n in counts.items())
    return f" ({len(runs)} runs: {runs[0]}, and {invoked})"


def settings_file_for(output: str) -> str:
    """Where the demo writes its settings, beside ``output``: ``demo.jsonl`` ->
    ``demo.config.json``."""
    root, ext = os.path.splitext(output)
    return (root if ext in (".jsonl", ".json") else output) + ".config.json"


def settings_mapping(config: Config) -> dict[str, Any]:
    """The settings of ``config`` that differ from the defaults, as a config file holds
    them (``otel-progress scan --config``), with the manifest. The digest key is never
    written (a secret): a scan gives the same digests only with the same
    ``OTEL_PROGRESS_DIGEST_KEY``."""
    default = Config()
    out: dict[str, Any] = {}
    for f in dataclasses.fields(Config):
        value = getattr(config, f.name)
        if f.name in ("digest_key", "manifest") or value == getattr(default, f.name):
            continue
        out[f.name] = sorted(value) if isinstance(value, frozenset) else value
    out["manifest"] = [
        {k: (sorted(v) if isinstance(v, frozenset) else v) for k, v in dataclasses.asdict(spec).items()}
        for spec in config.manifest.values()
    ]
    return out


def write_settings(config: Config, path: str) -> None:
    """Write :func:`settings_mapping` of ``config`` to ``path`` as JSON."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(settings_mapping(config), fh, indent=2, sort_keys=True)
        fh.write("\n")


def reproduce_command(output: str, settings_path: str) -> str:
    """The ``otel-progress scan`` command that gives the demo's detections again."""
    import shlex

    return f"otel-progress scan --config {shlex.quote(settings_path)} --format table {shlex.quote(output)}"


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def _metric_totals(reader: Any) -> list[tuple[str, str]]:
    data = reader.get_metrics_data()
    rows: list[tuple[str, str]] = []
    if data is None:
        return rows
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if not metric.name.startswith("progress."):
                    continue
                for point in metric.data.data_points:
                    attrs = point.attributes or {}
                    keys = (("progress.reason", "reason"), ("progress.level", "level"),
                            ("gen_ai.agent.name", "agent"), ("gen_ai.tool.name", "tool"))
                    label = ",".join(f"{short}={attrs[k]}" for k, short in keys if k in attrs)
                    rows.append((f"{metric.name}{{{label}}}" if label else metric.name, str(point.value)))
    rows.sort()
    return rows
