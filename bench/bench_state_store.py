"""What the run-state hand-off store (``serve --state-store``) costs per batch, measured side
by side with the same batches without it.

    python -m bench.bench_state_store                      # starts redis-server on a free port
    python -m bench.bench_state_store --redis-url redis://127.0.0.1:6379/0 --traces 16 --batches 300

Three detectors (:class:`otel_progress.service.detector.BatchDetector`, the service's
detection of a request's bytes, no gRPC) get the same requests, one right after the other,
the order alternating from batch to batch: **plain** (no state kept), **store** (state
written to Redis after each batch: what one replica of a ring pays, its traces never moving)
and **hand-off** (two detectors sharing Redis take the batches in turn, so every trace of
every batch was last continued by the other one: the worst case of a ring change, every
trace read back before the batch is evaluated). Each request holds ``--traces`` looping
agent runs (a model call and a tool call per run, as an agent's exporter sends a turn), each
run going on over the batches. Printed: the median per-batch wall time of each, the ratios
to plain, the thread CPU ratio, and the mean size of one trace's state. Redis runs on the
same machine (loopback): a store across a network adds its round trips (two per batch, one
more for traces that moved). Then the same three for logs requests
(:class:`otel_progress.service.logs.LogsDetector`): each request one tool result of
``--traces`` looping Codex CLI sessions (the record of the repository's Codex capture under
other session and call ids), so every request touches that many log runs; with the
detections each found (the same in all three: what the store carries loses nothing). Then
the pause of one checkpoint (``--state-dir``) of 1,000 open traces.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_progress.engine import ProgressEngine
from otel_progress.runs.carry import export_trace
from otel_progress.service.detector import BatchDetector
from otel_progress.service.logs import LogsDetector
from otel_progress.service.metrics import ServiceMetrics
from otel_progress.service.otlp import key_values
from otel_progress.service.state import CHECKPOINT_NAME, STORE_HELD_BYTES, Checkpoints, RedisStore, StateKeeper
from tests.logs.conftest import b64_ids, documents, golden

T0 = 1_700_000_000_000_000_000


def _span(trace: int, span: int, parent: int, name: str, start: float, attrs: dict) -> trace_pb2.Span:
    s = trace_pb2.Span(trace_id=trace.to_bytes(16, "big"), span_id=span.to_bytes(8, "big"),
                       parent_span_id=parent.to_bytes(8, "big"), name=name,
                       start_time_unix_nano=T0 + int(start * 1e9), end_time_unix_nano=T0 + int((start + 0.5) * 1e9))
    s.attributes.extend(key_values(attrs))
    return s


def batches(traces: int, count: int) -> list[bytes]:
    """``count`` requests, each one turn (model call, tool call) of ``traces`` looping runs."""
    out = []
    for b in range(count):
        spans = []
        for t in range(traces):
            trace = 1000 + t
            spans.append(_span(trace, 10_000 + 2 * b, 1, "chat model", 2.0 * b, {
                "gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 900, "gen_ai.usage.output_tokens": 40}))
            spans.append(_span(trace, 10_001 + 2 * b, 1, "execute_tool search", 2.0 * b + 1, {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                "gen_ai.tool.call.arguments": json.dumps({"q": f"weather in paris {b % 3}"}),
                "gen_ai.tool.call.result": json.dumps({"items": [], "page": b % 3})}))
        req = trace_service_pb2.ExportTraceServiceRequest()
        rs = req.resource_spans.add()
        rs.scope_spans.add().spans.extend(spans)
        out.append(req.SerializeToString())
    return out


def _detector(url: str | None) -> BatchDetector:
    engine = ProgressEngine()
    det = BatchDetector(engine, ServiceMetrics(), batch_cache=0)
    if url:
        det.keeper = StateKeeper(engine.state_codec(), det.metrics, store=RedisStore(url, 300.0))
    return det


def _free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis() -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("redis-server") or shutil.which("valkey-server")
    if binary is None:
        sys.exit("bench_state_store: no redis-server (apt-get install -y redis-server), or give --redis-url")
    port = _free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", tempfile.gettempdir()], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    store = RedisStore(url, 60)
    for _ in range(200):
        try:
            store.ping()
            return proc, url
        except store.errors:
            time.sleep(0.05)
    proc.kill()
    sys.exit("bench_state_store: redis-server did not start")


def side_by_side(make: Callable[[str | None], Any], url: str, reqs: list[bytes]) -> SideBySide:
    """The requests through plain, store and hand-off detectors made by ``make(url or
    None)``, one right after the other, the order alternating from request to request."""
    key = f"bench-{os.getpid()}-{time.time_ns()}"
    plain, store = make(None), make(url)
    hand = [make(url), make(url)]
    for det in (store, *hand):
        det.keeper.store.prefix = f"{key}-{id(det) if det is store else 'hand'}:"
    out = SideBySide(store, hand)
    for i, raw in enumerate(reqs):
        order = [("plain", plain), ("store", store), ("hand-off", hand[i % 2])]
        if i % 2:
            order.reverse()
        for name, det in order:
            c0, w0 = time.thread_time(), time.perf_counter()
            result = det.process(raw)
            out.wall[name].append(time.perf_counter() - w0)
            out.cpu[name] += time.thread_time() - c0
            out.found[name] += len(getattr(result, "new_detections", ()))
    return out


@dataclass
class SideBySide:
    """What :func:`side_by_side` measured: wall times per request, thread CPU and new
    detections, by variant (``plain``, ``store``, ``hand-off``); the store's and the
    hand-off's detectors."""

    store: Any
    hand: list[Any]
    wall: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in VARIANTS})
    cpu: dict[str, float] = field(default_factory=lambda: dict.fromkeys(VARIANTS, 0.0))
    found: dict[str, int] = field(default_factory=lambda: dict.fromkeys(VARIANTS, 0))

    def medians(self, count: int) -> dict[str, float]:
        """Median wall per request, the first tenth left out as warm-up."""
        warm = max(1, count // 10)
        return {k: statistics.median(v[warm:]) for k, v in self.wall.items()}


VARIANTS = ("plain", "store", "hand-off")


def run(url: str, traces: int, count: int) -> None:
    m = side_by_side(_detector, url, batches(traces, count))
    store, hand, cpu = m.store, m.hand, m.cpu
    med = m.medians(count)
    moved = hand[0].metrics.value("progress.service.state.continued") + hand[1].metrics.value(
        "progress.service.state.continued")
    bundles = [export_trace(store.traces, t, held_limit=STORE_HELD_BYTES)
               for t in list(store.traces.open.traces)[:traces]]
    sizes = [len(store.keeper.codec.dumps(b)) for b in bundles if b is not None]  # type: ignore[union-attr]
    print(f"{count} batches of {traces} looping runs (one turn each, {2 * traces} spans), Redis on loopback")
    print(f"  median wall per batch: plain {med['plain'] * 1e3:.2f} ms, store {med['store'] * 1e3:.2f} ms,"
          f" hand-off {med['hand-off'] * 1e3:.2f} ms")
    print(f"  store / plain:    wall {med['store'] / med['plain']:.2f}x, thread CPU"
          f" {cpu['store'] / cpu['plain']:.2f}x")
    print(f"  hand-off / plain: wall {med['hand-off'] / med['plain']:.2f}x, thread CPU"
          f" {cpu['hand-off'] / cpu['plain']:.2f}x ({int(moved)} traces continued from the store)")
    if sizes:
        print(f"  one trace's state: {statistics.mean(sizes) / 1024:.1f} KiB on average"
              f" (max {max(sizes) / 1024:.1f} KiB)")


CODEX_CAPTURE = "codex-0.171.0-loop.jsonl"  # (tests/coding_agents/golden)


def log_batches(runs: int, count: int) -> list[bytes]:
    """``count`` logs requests, each one tool result of ``runs`` Codex CLI sessions (the
    capture's record under other session and call ids), the same command and output every
    time: looping log runs."""
    template = resource = scope = None
    for doc in documents(golden(CODEX_CAPTURE)):
        req = json_format.ParseDict(b64_ids(doc), logs_service_pb2.ExportLogsServiceRequest(),
                                    ignore_unknown_fields=True)
        for rl in req.resource_logs:
            for sl in rl.scope_logs:
                for record in sl.log_records:
                    if any(a.key == "event.name" and a.value.string_value == "codex.tool_result"
                           for a in record.attributes):
                        template, resource, scope = record, rl.resource, sl.scope
    if template is None:
        sys.exit(f"bench_state_store: no codex.tool_result record in {CODEX_CAPTURE}")
    out = []
    for b in range(count):
        req = logs_service_pb2.ExportLogsServiceRequest()
        sl = req.resource_logs.add(resource=resource).scope_logs.add(scope=scope)
        for r in range(runs):
            record = sl.log_records.add()
            record.CopyFrom(template)
            record.time_unix_nano = record.observed_time_unix_nano = template.time_unix_nano + b * 1_000_000_000
            for attr in record.attributes:
                if attr.key == "conversation.id":
                    attr.value.string_value = f"bench-session-{r}"
                elif attr.key == "call_id":
                    attr.value.string_value = f"call_{b:05d}"
                elif attr.key == "tool_result_seq":
                    attr.value.int_value = b
        out.append(req.SerializeToString())
    return out


def _logs_detector(url: str | None) -> LogsDetector:
    engine = ProgressEngine()
    det = LogsDetector(engine, ServiceMetrics())
    if url:
        det.keeper = StateKeeper(engine.state_codec(), det.metrics, store=RedisStore(url, 300.0))
    return det


def run_logs(url: str, runs: int, count: int) -> None:
    """The same comparison for logs requests (coding agents' log runs carried, issue 27)."""
    m = side_by_side(_logs_detector, url, log_batches(runs, count))
    med, found = m.medians(count), m.found
    print(f"{count} logs requests of {runs} looping Codex CLI runs (one tool result each), Redis on loopback")
    print(f"  median wall per request: plain {med['plain'] * 1e3:.2f} ms, store {med['store'] * 1e3:.2f} ms,"
          f" hand-off {med['hand-off'] * 1e3:.2f} ms; store / plain {med['store'] / med['plain']:.2f}x,"
          f" hand-off / plain {med['hand-off'] / med['plain']:.2f}x")
    print(f"  detections: plain {found['plain']}, store {found['store']}, hand-off {found['hand-off']}")


def checkpoint_cost(traces: int = 1000, turns: int = 8) -> None:
    """The pause of one checkpoint (``--state-dir``) of ``traces`` open traces, beside the
    time the same detector took to build that state."""
    det = _detector(None)
    w0 = time.perf_counter()
    for raw in batches(traces, turns):
        det.process(raw)
    build = time.perf_counter() - w0
    with tempfile.TemporaryDirectory() as tmp:
        keeper = StateKeeper(det.engine.state_codec(), det.metrics, checkpoints=Checkpoints(tmp, 1 << 30))
        w0 = time.perf_counter()
        written = keeper.checkpoint(det)
        pause = time.perf_counter() - w0
        size = os.path.getsize(os.path.join(tmp, CHECKPOINT_NAME))
    print(f"checkpoint of {written} open traces ({turns} turns each): {pause * 1e3:.0f} ms"
          f" ({pause / written * 1e3:.3f} ms per trace, {size / written / 1024:.1f} KiB per trace),"
          f" {pause / build:.2f}x the time their {turns} batches took to detect")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="", help="a running Redis/Valkey (default: start redis-server)")
    parser.add_argument("--traces", type=int, default=16, help="runs per batch (default 16)")
    parser.add_argument("--batches", type=int, default=200, help="batches (default 200)")
    args = parser.parse_args(argv)
    proc = None
    url = args.redis_url
    if not url:
        proc, url = start_redis()
    try:
        run(url, args.traces, args.batches)
        run_logs(url, args.traces, args.batches)
        checkpoint_cost()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
