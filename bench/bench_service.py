"""Spans per second `otel-progress serve` sustains on one core, side by side with a
pass-through OTLP service that only parses and forwards.

Run: ``python bench/bench_service.py [--seconds 8] [--rounds 2] [--tool-share 0.10]``

Layout (all on 127.0.0.1): a load generator and a downstream sink that only acknowledges
run on CPU 1; the service under test runs alone on CPU 0 (``sched_setaffinity``, which
also pins grpcio's threads). Each round measures the pass-through service, then
``otel-progress serve`` (inline mode, defaults), with the same pre-built requests: 512
spans each, ``--tool-share`` of them ``execute_tool`` spans carrying arguments (~200 B)
and results (~2 KB) as JSON strings, the rest HTTP-like spans with eight attributes;
traces of 50 spans, every request with new trace ids, so that nothing is answered from
the retry cache. The best round of each is reported, with the ratio and the targets
(ratio >= 0.7, >= 50,000 spans/s). Exit status 0 whether or not the targets are met: the
figures are for reading.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent import futures
from contextlib import closing
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SPANS_PER_REQUEST = 512  # --spans-per-request
SPANS_PER_TRACE = 50
METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with closing(socket.socket()) as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"port {port} did not open")


def set_spans_per_request(n: int) -> None:
    global SPANS_PER_REQUEST
    SPANS_PER_REQUEST = max(1, n)


def engine_us_per_call(tool_share: float) -> float:
    """The engine alone on this workload's tool spans: microseconds per tool call."""
    from opentelemetry.proto.trace.v1 import trace_pb2

    from otel_progress import ProgressEngine
    from otel_progress.service.otlp import SlimRequest, may_be_genai, span_record
    from otel_progress.spans import read_tool_call

    calls = []
    for raw in build_requests(max(1, 3000 // max(1, int(SPANS_PER_REQUEST * tool_share))), tool_share, seed=11):
        for rs in SlimRequest.FromString(raw).resource_spans:
            for ss in rs.scope_spans:
                for b in ss.spans:
                    if may_be_genai(b):
                        calls.append(read_tool_call(span_record(trace_pb2.Span.FromString(b))))
    engine = ProgressEngine()
    pin(0)
    t0 = time.perf_counter()
    for c in calls:
        engine.observe(c, flush=True)
    return (time.perf_counter() - t0) / max(1, len(calls)) * 1e6


def pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity") and cpu < (os.cpu_count() or 1):
        os.sched_setaffinity(0, {cpu})


# -- workload ---------------------------------------------------------------------------


def build_requests(n: int, tool_share: float, seed: int = 7) -> list[bytes]:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.resource.v1 import resource_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    def kv(key: str, value: Any) -> common_pb2.KeyValue:
        if isinstance(value, int):
            return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(int_value=value))
        return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=str(value)))

    rnd = random.Random(seed)
    t0 = 1_700_000_000_000_000_000
    out = []
    trace_no = 0
    for r in range(n):
        rs = trace_pb2.ResourceSpans(resource=resource_pb2.Resource(attributes=[kv("service.name", "bench-agent")]))
        ss = rs.scope_spans.add(scope=common_pb2.InstrumentationScope(name="bench"))
        for i in range(SPANS_PER_REQUEST):
            if i % SPANS_PER_TRACE == 0:
                trace_no += 1
                trace_id = trace_no.to_bytes(16, "big")
            span_id = (r * SPANS_PER_REQUEST + i + 1).to_bytes(8, "big")
            start = t0 + (r * SPANS_PER_REQUEST + i) * 1_000_000
            s = ss.spans.add(trace_id=trace_id, span_id=span_id, parent_span_id=(1).to_bytes(8, "big"),
                             start_time_unix_nano=start, end_time_unix_nano=start + 500_000,
                             kind=trace_pb2.Span.SPAN_KIND_CLIENT)
            if rnd.random() < tool_share:
                s.name = "execute_tool search_docs"
                args = json.dumps({"path": f"src/pkg/module_{rnd.randrange(50)}.py", "query": "x" * 120,
                                   "options": {"recursive": True, "limit": 50, "offset": rnd.randrange(10)}})
                rows = [{"id": rnd.randrange(10**6), "title": f"row {j}", "body": "lorem ipsum " * 5}
                        for j in range(20)]
                s.attributes.extend([kv("gen_ai.operation.name", "execute_tool"),
                                     kv("gen_ai.tool.name", "search_docs"),
                                     kv("gen_ai.tool.call.arguments", args),
                                     kv("gen_ai.tool.call.result", json.dumps({"status": "ok", "items": rows}))])
            else:
                s.name = "GET /api/v1/items"
                s.attributes.extend([kv("http.request.method", "GET"), kv("url.full", f"https://svc.invalid/{i}"),
                                     kv("http.response.status_code", 200), kv("server.address", "svc.invalid"),
                                     kv("server.port", 443), kv("network.protocol.version", "1.1"),
                                     kv("user_agent.original", "bench/1.0"), kv("http.route", "/api/v1/items")])
        out.append(trace_service_pb2.ExportTraceServiceRequest(resource_spans=[rs]).SerializeToString())
    return out


# -- roles ------------------------------------------------------------------------------


def role_sink(port: int) -> None:
    import grpc

    pin(1)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16),
                         options=[("grpc.max_receive_message_length", 64 << 20), ("grpc.so_reuseport", 0)])
    handler = grpc.method_handlers_generic_handler(
        "opentelemetry.proto.collector.trace.v1.TraceService",
        {"Export": grpc.unary_unary_rpc_method_handler(lambda raw, ctx: b"", request_deserializer=None,
                                                       response_serializer=None)})
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()  # until SIGTERM


def role_passthrough(port: int, sink: int) -> None:
    """The baseline: the same gRPC server setup and forwarder as the service, parsing each
    request (``ExportTraceServiceRequest.FromString``) and forwarding its bytes."""
    import grpc

    from otel_progress.service.forwarder import Forwarder
    from otel_progress.service.otlp import ExportTraceServiceRequest, ExportTraceServiceResponse

    pin(0)
    fwd = Forwarder(f"127.0.0.1:{sink}")

    def export(raw: bytes, context: grpc.ServicerContext) -> Any:
        ExportTraceServiceRequest.FromString(raw)
        result = fwd.forward(raw)
        if not result.ok:
            context.abort(grpc.StatusCode.UNAVAILABLE, result.message)
        return ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16),
                         options=[("grpc.max_receive_message_length", 64 << 20), ("grpc.so_reuseport", 0)])
    handler = grpc.method_handlers_generic_handler(
        "opentelemetry.proto.collector.trace.v1.TraceService",
        {"Export": grpc.unary_unary_rpc_method_handler(
            export, request_deserializer=None, response_serializer=ExportTraceServiceResponse.SerializeToString)})
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()  # until SIGTERM


def role_client(port: int, seconds: float, concurrency: int, tool_share: float, n_requests: int,
                warmup: float) -> None:
    import grpc

    pin(1)
    requests = build_requests(n_requests, tool_share)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)])
    call = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
    grpc.channel_ready_future(channel).result(timeout=30)
    lock = threading.Lock()
    state = {"ok": 0, "err": 0, "next": 0, "counting": False}
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            with lock:
                i = state["next"]
                state["next"] += 1
            raw = requests[i % len(requests)]
            try:
                call(raw, timeout=10)
                ok = True
            except grpc.RpcError:
                ok = False
            with lock:
                if state["counting"]:
                    state["ok" if ok else "err"] += 1

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    time.sleep(warmup)
    with lock:
        state["counting"] = True
    t0 = time.monotonic()
    time.sleep(seconds)
    with lock:
        state["counting"] = False
        ok, err = state["ok"], state["err"]
    elapsed = time.monotonic() - t0
    stop.set()
    for t in threads:
        t.join(15)
    if state["next"] > n_requests:
        print(f"warning: {state['next']} requests sent from {n_requests} distinct ones: repeats were answered"
              " from the retry cache", file=sys.stderr)
    print(json.dumps({"requests": ok, "errors": err, "seconds": elapsed,
                      "spans_per_s": ok * SPANS_PER_REQUEST / elapsed}))


# -- orchestration ----------------------------------------------------------------------


def _spawn(args: list[str], **kw: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, *args], env=env, text=True, **kw)


def _measure(target: str, sink: int, opts: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    if target == "pass-through":
        proc = _spawn([__file__, "--role", "passthrough", "--port", str(port), "--sink", str(sink),
                       "--spans-per-request", str(SPANS_PER_REQUEST)])
    else:
        proc = _spawn(["-c", "import os,sys; os.sched_setaffinity(0,{0}) if os.cpu_count()>1 else None;"
                       " from otel_progress.cli import main; sys.exit(main(sys.argv[1:]))",
                       "serve", "--listen", f"127.0.0.1:{port}", "--forward-endpoint", f"127.0.0.1:{sink}",
                       "--health-listen", "", "--log-level", "warning"],
                      stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        n = int(opts.expected_rate * (opts.seconds + opts.warmup) / SPANS_PER_REQUEST) + 50
        client = _spawn([__file__, "--role", "client", "--port", str(port), "--seconds", str(opts.seconds),
                         "--concurrency", str(opts.concurrency), "--tool-share", str(opts.tool_share),
                         "--requests", str(n), "--warmup", str(opts.warmup),
                         "--spans-per-request", str(SPANS_PER_REQUEST)], stdout=subprocess.PIPE)
        out, _ = client.communicate(timeout=opts.seconds + opts.warmup + 300)
        return json.loads(out.strip().splitlines()[-1])
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL after 15 s; nothing if it already ended."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=("sink", "passthrough", "client"), help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--sink", type=int, help=argparse.SUPPRESS)
    p.add_argument("--requests", type=int, default=1000, help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, default=8.0, help="measured seconds per run (default 8)")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first (default 2)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of both services; best is kept (default 2)")
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight (default 8)")
    p.add_argument("--tool-share", type=float, default=0.10, help="share of tool spans (default 0.10)")
    p.add_argument("--expected-rate", type=float, default=400_000, help=argparse.SUPPRESS)
    p.add_argument("--spans-per-request", type=int, default=SPANS_PER_REQUEST,
                   help=f"spans per Export request (default {SPANS_PER_REQUEST})")
    opts = p.parse_args()
    set_spans_per_request(opts.spans_per_request)
    if opts.role == "sink":
        role_sink(opts.port)
        return 0
    if opts.role == "passthrough":
        role_passthrough(opts.port, opts.sink)
        return 0
    if opts.role == "client":
        role_client(opts.port, opts.seconds, opts.concurrency, opts.tool_share, opts.requests, opts.warmup)
        return 0

    if (os.cpu_count() or 1) < 2:
        print("note: fewer than 2 CPUs: the service shares its core with the load generator", file=sys.stderr)
    sink = free_port()
    sink_proc = _spawn([__file__, "--role", "sink", "--port", str(sink)])
    results: dict[str, list[dict[str, Any]]] = {"pass-through": [], "otel-progress serve": []}
    try:
        wait_port(sink)
        for r in range(opts.rounds):
            for target in results:
                res = _measure(target, sink, opts)
                results[target].append(res)
                print(f"round {r + 1}: {target:<20} {res['spans_per_s']:>10,.0f} spans/s"
                      f"  ({res['requests']} requests, {res['errors']} errors)", flush=True)
    finally:
        sink_proc.send_signal(signal.SIGTERM)
        try:
            sink_proc.wait(10)
        except subprocess.TimeoutExpired:
            sink_proc.kill()
    best = {k: max(v, key=lambda x: x["spans_per_s"]) for k, v in results.items()}
    base = best["pass-through"]["spans_per_s"]
    ours = best["otel-progress serve"]["spans_per_s"]
    ratio = ours / base if base else 0.0
    print()
    print(f"one core, {SPANS_PER_REQUEST} spans per request, {opts.tool_share:.0%} tool spans,"
          f" {opts.concurrency} in flight, best of {opts.rounds} round(s) of {opts.seconds:g}s")
    print(f"  pass-through (parse + forward): {base:>10,.0f} spans/s")
    print(f"  otel-progress serve (inline):   {ours:>10,.0f} spans/s")
    engine_us = engine_us_per_call(opts.tool_share)
    per_span_us = 1e6 / ours if ours else 0.0
    engine_share = engine_us * opts.tool_share / per_span_us if per_span_us else 0.0
    print(f"  engine alone: {engine_us:.1f} us per tool call = {engine_us * opts.tool_share:.2f} us per span,"
          f" {engine_share:.0%} of the service's {per_span_us:.2f} us per span")
    print(f"  ratio: {ratio:.2f}x  (target >= 0.70x: {'met' if ratio >= 0.7 else 'NOT met'});"
          f" {ours:,.0f} spans/s (target >= 50,000: {'met' if ours >= 50_000 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
