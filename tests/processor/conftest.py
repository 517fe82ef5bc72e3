"""Shared helpers for the processor tests: a real SDK provider whose exporting processor
is wrapped by the progress processor, and GenAI span emitters."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from otel_progress import Config, Detection, ProgressEngine, ProgressSpanProcessor
from otel_progress.demo import ScriptedAgent
from tests.otel_console import console_spans, json_objects  # noqa: F401 - re-exported to the tests

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


@dataclass
class Rig:
    provider: TracerProvider
    exporter: InMemorySpanExporter
    processor: ProgressSpanProcessor
    reader: InMemoryMetricReader
    detections: list[Detection] = field(default_factory=list)

    def agent(self) -> ScriptedAgent:
        return ScriptedAgent(self.provider.get_tracer("tests"))

    def spans(self) -> list[ReadableSpan]:
        self.processor.force_flush()  # background analysis: wait for the worker
        return list(self.exporter.get_finished_spans())

    def by_id(self) -> dict[str, ReadableSpan]:
        return {format(s.context.span_id, "016x"): s for s in self.spans()}

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        data = self.reader.get_metrics_data()
        if data is None:
            return out
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for point in metric.data.data_points:
                        out.setdefault(metric.name, []).append((dict(point.attributes or {}), point.value))
        return out


def make_rig(config: Config | None = None, *, wrap: bool = True, id_generator: IdGenerator | None = None,
             **kwargs: Any) -> Rig:
    exporter = InMemorySpanExporter()
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    provider = TracerProvider(shutdown_on_exit=False, id_generator=id_generator)
    detections: list[Detection] = []
    kwargs.setdefault("on_detection", detections.append)
    inner = SimpleSpanProcessor(exporter)
    processor = ProgressSpanProcessor(inner if wrap else None, config=config or Config(),
                                      meter_provider=meters, **kwargs)
    if not wrap:
        provider.add_span_processor(inner)
    provider.add_span_processor(processor)
    return Rig(provider, exporter, processor, reader, detections)


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = make_rig()
    yield r
    r.provider.shutdown()


def progress_attrs(span: ReadableSpan) -> dict[str, Any]:
    return {k: v for k, v in (span.attributes or {}).items() if k.startswith("progress.")}


def progress_events(span: ReadableSpan) -> list[tuple[str, dict[str, Any]]]:
    return [(e.name, dict(e.attributes or {})) for e in span.events if e.name in ("no_progress", "livelock")]


def docs_loop(agent: ScriptedAgent, turns: int = 6, healthy: bool = False, name: str = "docs-agent") -> None:
    """The seed 000 docs agent: rephrased searches, all empty (or, healthy, all different)."""
    with agent.agent(name):
        for i in range(turns):
            agent.chat(1000, 50)
            result = {"results": [f"doc-{i}"], "total": 1} if healthy else {"results": [], "total": 0}
            agent.tool("search_docs", {"q": f"refund policy variant {i}"}, result)


def run_script(args: list[str], env: dict[str, str] | None = None, timeout: float = 120,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTEST_"))}
    full_env.update(env or {})
    return subprocess.run(args, env=full_env, capture_output=True, text=True, timeout=timeout,
                          cwd=str(cwd or ROOT), check=False)


PYTHON = sys.executable


def run_docs_loops_in_threads(r: Rig, threads: int = 16, runs_per_thread: int = 12) -> None:
    """Run ``runs_per_thread`` looping docs agents on each of ``threads`` threads started
    together; fail if any thread raised or did not finish."""
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            barrier.wait()
            for i in range(runs_per_thread):
                docs_loop(r.agent(), turns=14, name=f"agent-{n}-{i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=300)
    assert not errors, errors
    assert not any(t.is_alive() for t in pool), "a worker thread did not finish"


class ExplodingProcessor(SpanProcessor):
    """A wrapped processor that raises on every call."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise RuntimeError("boom at start")

    def on_end(self, span: ReadableSpan) -> None:
        raise ValueError("boom at end")


class BrokenEngine(ProgressEngine):
    """An engine with a bug in end_run."""

    def end_run(self, *args: Any, **kwargs: Any) -> Any:
        raise KeyError("engine bug")


def in_forked_child(work: Callable[[], Any]) -> Any:
    """Run ``work`` in a forked child process and return what it returned (a literal:
    numbers, strings, booleans and tuples or lists of them, passed back through a pipe).
    Fails the test if the child raised."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            os.close(read_fd)
            os.write(write_fd, repr(work()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    data = b""
    while chunk := os.read(read_fd, 4096):
        data += chunk
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return ast.literal_eval(data.decode())
