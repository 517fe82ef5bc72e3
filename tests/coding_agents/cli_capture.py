"""Running a coding CLI from the npm registry against a scripted model API and capturing
what it exports, for the Claude Code, Codex CLI, Gemini CLI and Qwen Code tests.

- :func:`npm_install` installs a pinned package under ``~/.cache/otel-progress/npm/`` (once)
  and returns its ``node_modules`` (:func:`npm_file`: one file in it); without npm or the
  registry the test is skipped, or fails under ``CI=true``.
- :func:`workspace`, :func:`cli_env` and :func:`run_cli` set up and run one scenario:
  a work directory with ``notes.txt``, a home, the environment, the headless CLI.
- :class:`Receiver` is the shared OTLP/HTTP receiver on 127.0.0.1 (:mod:`.otlp_http`).
- :func:`write_jsonl` writes captured requests in the Collector file exporter's format
  (one ``Export*ServiceRequest`` per line); :func:`slim` shortens, for the golden files,
  the long attributes of records no reader reads (Gemini's prompt and model-response
  records are hundreds of KiB per run).
- :func:`read_records` decodes an OTLP/JSON logs file into
  :class:`~otel_progress.conventions.logs.LogRecordView` and :func:`detect` runs the readers and the
  engine over it, run by run (what ``scan`` does with logs); :func:`brief` is what it found
  in short; :func:`golden_file` a golden file the test needs.
- :func:`serving` is a started ``otel-progress serve`` (inline) forwarding to a
  :class:`GrpcSink`, for the serve tests.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from otel_progress import Config, ProgressEngine
from otel_progress.conventions.logs import LogObservation, LogRecordView, event_names, read_log
from otel_progress.model import Detection
from otel_progress.otlp.files import _attributes, any_value
from otel_progress.otlp.logs_json import event_name_of, records_from_request
from otel_progress.scan import scan_paths
from otel_progress.service.options import ServiceConfig
from otel_progress.service.server import ProgressService

from .otlp_http import OtlpHttpReceiver

#: The receiver the CLI tests export to (the shared one of :mod:`.otlp_http`).
Receiver = OtlpHttpReceiver
GOLDEN = Path(__file__).parent / "golden"
CACHE = Path.home() / ".cache" / "otel-progress" / "npm"
#: Set to 1 to rewrite the golden files from a fresh capture.
UPDATE_ENV = "OTEL_PROGRESS_UPDATE_GOLDEN"


def unavailable(reason: str) -> None:
    """Skip the test (locally) or fail it (under ``CI=true``) for a missing tool."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def npm_install(package: str, version: str, name: str, timeout: float = 600) -> Path:
    """``node_modules`` of ``package@version`` installed under ``~/.cache/otel-progress/npm/
    <name>-<version>`` (installed on first use)."""
    root = CACHE / f"{name}-{version}"
    marker = root / ".installed"
    if marker.exists():
        return root / "node_modules"
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        unavailable("node and npm are needed to install " + package)
    root.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", str(root),
             f"{package}@{version}"],
            capture_output=True, text=True, timeout=timeout, check=False,
        )
    except subprocess.TimeoutExpired:
        unavailable(f"npm install {package}@{version} took longer than {timeout:.0f} s")
    if done.returncode != 0:
        unavailable(f"npm install {package}@{version} failed: {done.stderr.strip()[-500:]}")
    marker.write_text(f"{package}@{version}\n")
    return root / "node_modules"


def npm_file(package: str, version: str, name: str, relative: str) -> Path:
    """A file of the installed package (``relative`` to its ``node_modules``): the CLI's
    native binary or its script."""
    path = npm_install(package, version, name) / relative
    if not path.exists():
        unavailable(f"{package}@{version} installed no {relative}")
    return path


def node() -> str:
    """The ``node`` executable (the test is unavailable without it)."""
    found = shutil.which("node")
    if found is None:
        unavailable("node is needed to run this CLI")
    return found


def workspace(tmp: Path, notes: str, home: str = "home") -> tuple[Path, Path]:
    """A work directory holding ``notes.txt`` and an empty home directory under ``tmp``."""
    work, home_dir = tmp / "work", tmp / home
    work.mkdir()
    home_dir.mkdir()
    (work / "notes.txt").write_text(notes)
    return work, home_dir


ToolCalls = Sequence[Sequence[tuple[str, dict[str, Any]]]]


def with_cwd(script: ToolCalls, cwd: str) -> list[list[tuple[str, dict[str, Any]]]]:
    """A script of tool calls with ``{cwd}`` in their string arguments replaced."""
    return [[(name, {k: v.replace("{cwd}", cwd) if isinstance(v, str) else v for k, v in args.items()})
             for name, args in turn] for turn in script]


def cli_env(home: Path, **settings: str) -> dict[str, str]:
    """The CLI's whole environment: ``PATH``, ``HOME`` and ``settings``."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), **settings}


def run_cli(argv: Sequence[str], *, env: dict[str, str], timeout: float, expect: str,
            cwd: Path | str | None = None, stdin: int | None = None) -> subprocess.CompletedProcess[str]:
    """Run a headless CLI to its end: it must exit 0 and print ``expect``."""
    try:
        done = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=stdin, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(map(str, argv[:3]))} ... did not finish within {timeout:.0f} s")
    assert done.returncode == 0, done.stderr[-2000:]
    assert expect in done.stdout, done.stdout[-2000:]
    return done


def golden_file(name: str) -> Path:
    """``golden/<name>``; the test fails if it is missing."""
    path = GOLDEN / name
    if not path.exists():
        pytest.fail(f"{name} is missing: run with {UPDATE_ENV}=1 where the CLI can be installed")
    return path


def write_jsonl(path: Path, requests: Iterable[dict[str, Any]]) -> None:
    """Write export requests one per line (the Collector file exporter's format)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for request in requests:
            out.write(json.dumps(request, separators=(",", ":")) + "\n")


_SLIM_CHARS = 1024


def _slim_attributes(items: list[dict[str, Any]]) -> None:
    for kv in items or ():
        value = kv.get("value") or {}
        text = value.get("stringValue")
        if isinstance(text, str) and len(text) > _SLIM_CHARS:
            value["stringValue"] = f"[{len(text)} characters left out of the golden file]"


def slim(requests: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Export requests for a golden file: records and spans no reader reads (prompts,
    model requests and responses) keep their place, but their string attributes longer
    than 1 KiB are replaced by their length; what the readers read is left as sent."""
    read = event_names()
    out = [json.loads(json.dumps(r)) for r in requests]
    for request in out:
        for resource_logs in request.get("resourceLogs", ()):
            for scope_logs in resource_logs.get("scopeLogs", ()):
                for record in scope_logs.get("logRecords", ()):
                    attributes = _attributes(record.get("attributes"))
                    if event_name_of(record.get("eventName"), attributes, any_value(record.get("body"))) not in read:
                        _slim_attributes(record.get("attributes"))
        for resource_spans in request.get("resourceSpans", ()):
            for scope_spans in resource_spans.get("scopeSpans", ()):
                for span in scope_spans.get("spans", ()):
                    if _attributes(span.get("attributes")).get("gen_ai.operation.name") != "tool_call":
                        _slim_attributes(span.get("attributes"))
    return out


def read_records(path: Path) -> Iterator[LogRecordView]:
    """The log records of an OTLP/JSON logs file, in file order, through the project's
    adapter (:func:`otel_progress.otlp.logs_json.records_from_request`, as scan reads them)."""
    index = 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        for record in records_from_request(json.loads(line), source=str(path), line=number, start_index=index):
            index = record.index + 1
            yield record


def common_keys(path: Path, event_name: str) -> set[str]:
    """The attribute keys every ``event_name`` record of a logs file has."""
    keys = [set(r.attributes) for r in read_records(path) if r.event_name == event_name]
    assert keys, f"no {event_name} in {path.name}"
    return set.intersection(*keys)


def observations(path: Path) -> list[LogObservation]:
    """What the registered readers find in a logs file, in file order."""
    return [o for o in map(read_log, read_records(path)) if o is not None]


def scan_detections(path: Path) -> list[Detection]:
    """The detections ``otel-progress scan`` reports for a logs file (its own reader of
    OTLP/JSON, its run tracker)."""
    result = scan_paths([str(path)], progress=False)
    assert not result.unreadable, [p.message for p in result.problems]
    return [d for report in result.reports for d in report.detections]


def same_detections(a: list[Detection], b: list[Detection]) -> bool:
    """Whether two lists hold the same detections (reason, turn, level, tool, figures)."""
    def key(d: Detection) -> tuple:
        return (d.reason, d.turn, d.level, d.tool, sorted(d.event_attributes().items()))
    return [key(d) for d in a] == [key(d) for d in b]


def detect(path: Path, config: Config | None = None) -> list[Detection]:
    """The detections of the engine (``config``: the default) over a logs file, run by run
    in each run's order (a compaction that names only its session belongs to the session's
    run seen last)."""
    runs: dict[str, list[LogObservation]] = {}
    for observation in observations(path):
        key = observation.run_key
        if observation.session_wide:
            key = next((k for k in reversed(runs) if k.startswith(key)), "")
            if not key:
                continue
        runs.setdefault(key, []).append(observation)
        runs[key] = runs.pop(key)  # seen last
    engine = ProgressEngine(config)
    out: list[Detection] = []
    for run_key, items in runs.items():
        for n, item in enumerate(sorted(items, key=lambda o: o.order)):
            if item.kind == "tokens":
                engine.record_tokens(run_key, run_key, item.tokens, input_tokens=item.input_tokens)
                if item.output is not None:  # the model's answer (Gemini CLI's api_response text)
                    out.extend(engine.observe_model(dataclasses.replace(
                        item.output, trace_id=run_key, run_id=run_key, span_id=f"output-{n}")))
            elif item.kind == "tool" and item.call is not None:
                out.extend(engine.observe(dataclasses.replace(item.call, trace_id=run_key, run_id=run_key)))
            elif item.kind == "compaction" and item.compaction is not None:
                out.extend(engine.compaction(dataclasses.replace(item.compaction, trace_id=run_key, run_id=run_key,
                                                                 span_id=f"compaction-{n}")))
        out.extend(engine.flush(run_key))
    return out


def brief(path: Path) -> list[tuple[str, int, str | None]]:
    """The detections of a logs file in short: (reason, turn, evidence level)."""
    return [(d.reason.value, d.turn, d.figures.get("evidence_level")) for d in detect(path)]


def assert_slim_detects_the_same(path: Path, tmp: Path) -> None:
    """A golden file made from the capture at ``path`` (long unread attributes shortened,
    :func:`slim`) gives what the full capture gives."""
    slimmed = tmp / "slim.jsonl"
    write_jsonl(slimmed, slim(json.loads(line) for line in path.read_text().splitlines()))
    assert detect(slimmed) == detect(path)


class GrpcSink:
    """A real OTLP/gRPC LogsService and TraceService on 127.0.0.1 that keeps what it gets
    (the downstream of ``otel-progress serve`` in the serve tests)."""

    def __init__(self) -> None:
        self.logs: list[Any] = []
        self.traces: list[Any] = []
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.so_reuseport", 0)])
        for service, request, response, kept in (
            ("opentelemetry.proto.collector.logs.v1.LogsService", logs_service_pb2.ExportLogsServiceRequest,
             logs_service_pb2.ExportLogsServiceResponse, self.logs),
            ("opentelemetry.proto.collector.trace.v1.TraceService", trace_service_pb2.ExportTraceServiceRequest,
             trace_service_pb2.ExportTraceServiceResponse, self.traces),
        ):
            def export(message: Any, context: Any, kept: list[Any] = kept, response: Any = response) -> Any:
                with self._lock:
                    kept.append(message)
                return response()

            handler = grpc.method_handlers_generic_handler(service, {"Export": grpc.unary_unary_rpc_method_handler(
                export, request_deserializer=request.FromString, response_serializer=response.SerializeToString)})
            self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def __enter__(self) -> GrpcSink:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop(0)

    def wait(self, ready: Callable[[list[tuple[str, dict[str, Any]]]], bool], timeout: float = 20.0,
             settle: float = 0.0) -> list[tuple[str, dict[str, Any]]]:
        """:meth:`log_records` once ``ready`` says so (or ``timeout`` seconds have gone),
        read again ``settle`` seconds later if that is set (what travels behind)."""
        deadline = time.monotonic() + timeout
        records = self.log_records()
        while time.monotonic() < deadline and not ready(records):
            time.sleep(0.2)
            records = self.log_records()
        if settle:
            time.sleep(settle)
            records = self.log_records()
        return records

    def span_names(self) -> set[str]:
        """The names of the spans received."""
        with self._lock:
            requests = list(self.traces)
        return {span.name for request in requests for rs in request.resource_spans for ss in rs.scope_spans
                for span in ss.spans}

    def span_events(self) -> list[tuple[str, str, dict[str, Any]]]:
        """``(span name, event name, event attributes)`` of every span event received."""
        with self._lock:
            requests = list(self.traces)
        out = []
        for request in requests:
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        for event in span.events:
                            attributes = {kv.key: kv.value.string_value or kv.value.int_value
                                          for kv in event.attributes}
                            out.append((span.name, event.name, attributes))
        return out

    def log_records(self) -> list[tuple[str, dict[str, Any]]]:
        """``(event name, attributes)`` of every log record received, in order."""
        with self._lock:
            requests = list(self.logs)
        out = []
        for request in requests:
            document = json_format.MessageToDict(request)
            for record in records_from_request(document):
                out.append((record.event_name, dict(record.attributes)))
        return out


def serve(forward_port: int, **options: Any) -> ProgressService:
    """A started ``otel-progress serve`` (inline, forwarding to ``forward_port``)."""

    options.setdefault("listen", "127.0.0.1:0")
    options.setdefault("health_listen", "")
    options.setdefault("drain_timeout", 1.0)
    options.setdefault("forward_endpoint", f"127.0.0.1:{forward_port}")
    return ProgressService(ServiceConfig(**options), Config()).start()


@contextmanager
def serving() -> Iterator[tuple[GrpcSink, ProgressService]]:
    """A :class:`GrpcSink` and a started ``serve`` forwarding to it (stopped at the end)."""
    with GrpcSink() as sink:
        service = serve(sink.port)
        try:
            yield sink, service
        finally:
            service.stop(grace=0.5)
