"""CPU per span of ``otel-progress serve`` (inline and tap) beside the real Collector hop,
on agent traffic, side by side in one run.

Run: ``python bench/bench_service.py [--seconds 6] [--rounds 3] [--rate 8000]
[--workloads agent,mixed] [--modes inline,tap]``

The hop: the project's own Collector (the ocb build of collector-config/builder.yaml that
the tests make, cached by collector-config/build-collector.sh) with one pipeline, OTLP
receiver -> batch (the gateway's settings: 512 spans or 200 ms) -> OTLP exporter (gzip), to
the same sink. ``otel-progress serve`` runs with its defaults (inline: forwards gzip to the
sink; tap: acknowledges, sends annotation spans to the sink).

The load: the same requests for every target, sent by a client process (gzip, as a
Collector's exporter sends them) at ``--rate`` spans per second, 8 in flight:

* ``agent``: the real agent runs of ``../shared/realtraces`` (all GenAI: ``invoke_agent``,
  ``chat`` and ``execute_tool`` spans; the synthetic scoreboard corpus where the real runs
  are absent), 16 runs in flight, 512 spans per request, every replay under a new trace
  id;
* ``mixed``: the same runs with plain spans of a web service in traces of their own, so
  that 10 % of the spans are tool calls.

Each target is a fresh process; after a warm-up, its CPU time (``/proc/<pid>/stat``, all
threads) is read before the measured requests and after the sink received all of them (for
the Collector, whose exports are asynchronous). The figure is CPU microseconds per span;
each round measures every target once, in rotating order; the ratios are the medians over
rounds of the per-round ratios. The goals (issue 16) are printed beside them. The engine's
share is the engine alone on the workload's tool calls (``ProgressEngine.observe``) per
span. Exit status 0 whether or not the goals are met: the figures are for reading.

``--role sink`` is the sink alone (bench_service_limits uses it).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from contextlib import closing
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TRACES_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
LOGS_METHOD = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
GOALS = {"inline": 1.5, "tap": 1.1, "logs inline": 1.5, "logs tap": 1.5}
_CLK = os.sysconf("SC_CLK_TCK")


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


def pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity") and cpu < (os.cpu_count() or 1):
        os.sched_setaffinity(0, {cpu})


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, all its threads."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _CLK


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL after 15 s; nothing if it already ended."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _spawn(args: list[str], **kw: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, *args], env=env, text=True, **kw)


# -- the sink ---------------------------------------------------------------------------


def role_sink(port: int, control: bool) -> None:
    """Acknowledges traces and logs; with ``control``, answers ``count`` on stdin with the
    spans and log records received so far."""
    import grpc

    from otel_progress.service.otlp import SlimRequest

    pin(1)
    lock = threading.Lock()
    totals = {"spans": 0, "records": 0}
    slim_logs = _slim_logs_type()

    def traces(raw: bytes, ctx: Any) -> bytes:
        if control:
            n = sum(len(ss.spans) for rs in SlimRequest.FromString(raw).resource_spans for ss in rs.scope_spans)
            with lock:
                totals["spans"] += n
        return b""

    def logs(raw: bytes, ctx: Any) -> bytes:
        if control:
            n = sum(len(sl.log_records) for rl in slim_logs.FromString(raw).resource_logs for sl in rl.scope_logs)
            with lock:
                totals["records"] += n
        return b""

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16),
                         options=[("grpc.max_receive_message_length", 256 << 20), ("grpc.so_reuseport", 0)])
    for service, handler in (("opentelemetry.proto.collector.trace.v1.TraceService", traces),
                             ("opentelemetry.proto.collector.logs.v1.LogsService", logs),
                             ("opentelemetry.proto.collector.metrics.v1.MetricsService", lambda raw, ctx: b"")):
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, {
            "Export": grpc.unary_unary_rpc_method_handler(handler, request_deserializer=None,
                                                          response_serializer=None)}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    if not control:
        server.wait_for_termination()  # until SIGTERM
        return
    for line in sys.stdin:
        if line.strip() == "count":
            with lock:
                print(f"{totals['spans']} {totals['records']}", flush=True)
    server.stop(0)


def _slim_logs_type() -> Any:
    """ExportLogsServiceRequest -> ResourceLogs -> ScopeLogs -> records as bytes."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="bench_slim_logs.proto", package="bench", syntax="proto3")
    for name, field_no, type_name in (("Req", 1, ".bench.RL"), ("RL", 2, ".bench.SL")):
        msg = fdp.message_type.add(name=name)
        msg.field.add(name="resource_logs" if name == "Req" else "scope_logs", number=field_no,
                      type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED, type_name=type_name)
    fdp.message_type.add(name="SL").field.add(name="log_records", number=2, type=f.TYPE_BYTES,
                                              label=f.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Req"))


class Sink:
    """The sink process, with its counters."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc = _spawn([__file__, "--role", "sink", "--port", str(self.port), "--control"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        wait_port(self.port)

    def count(self) -> tuple[int, int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        spans, records = self.proc.stdout.readline().split()
        return int(spans), int(records)

    def wait_for(self, spans: int, records: int, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.count()
            if got[0] >= spans and got[1] >= records:
                return True
            time.sleep(0.02)
        return False

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        stop_process(self.proc)


# -- the client -------------------------------------------------------------------------


def role_client(port: int, requests_file: str, method: str, rate: float, warmup: int, concurrency: int) -> None:
    """Sends the warm-up requests, says ``warm``, waits for ``go`` on stdin, sends the rest
    at ``rate`` units (spans or records) per second and prints what it sent."""
    import grpc

    pin(1)
    with open(requests_file, "rb") as fh:
        requests: list[tuple[bytes, int]] = pickle.load(fh)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 256 << 20)])
    call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
    grpc.channel_ready_future(channel).result(timeout=30)

    def send(batch: list[tuple[bytes, int]], paced: bool) -> dict[str, Any]:
        lock = threading.Lock()
        state = {"next": 0, "ok": 0, "units": 0, "errors": 0}
        t0 = time.monotonic()
        due = [0.0] * len(batch)
        elapsed = 0.0
        for i in range(len(batch)):
            due[i] = elapsed
            elapsed += batch[i][1] / rate if paced else 0.0

        def worker() -> None:
            while True:
                with lock:
                    i = state["next"]
                    if i >= len(batch):
                        return
                    state["next"] += 1
                wait = t0 + due[i] - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                raw, units = batch[i]
                try:
                    call(raw, timeout=30, compression=grpc.Compression.Gzip)
                    ok = True
                except grpc.RpcError as exc:
                    ok = False
                    if state["errors"] < 3:
                        print(f"client: {exc.code()} {exc.details()[:200]}", file=sys.stderr)
                with lock:
                    if ok:
                        state["ok"] += 1
                        state["units"] += units
                    else:
                        state["errors"] += 1

        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        state["seconds"] = time.monotonic() - t0
        return state

    send(requests[:warmup], paced=False)
    print("warm", flush=True)
    sys.stdin.readline()
    result = send(requests[warmup:], paced=True)
    print(json.dumps(result), flush=True)
    channel.close()


# -- targets ----------------------------------------------------------------------------


def collector_binary() -> str | None:
    """The Collector the tests build (build-collector.sh reuses the cached one)."""
    script = REPO / "collector-config" / "build-collector.sh"
    if shutil.which("go") is None and not os.environ.get("OTELCOL"):
        return None
    if os.environ.get("OTELCOL"):
        return os.environ["OTELCOL"]
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False, timeout=3600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    return lines[-1].strip() if proc.returncode == 0 and lines else None


COLLECTOR_CONFIG = """
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{port}
        max_recv_msg_size_mib: 64
processors:
  batch:
    timeout: 200ms
    send_batch_size: 512
    send_batch_max_size: 1024
exporters:
  otlp_grpc:
    endpoint: 127.0.0.1:{sink}
    compression: gzip
    tls:
      insecure: true
service:
  telemetry:
    logs:
      level: warn
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp_grpc]
    logs:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp_grpc]
"""


def role_passthrough(port: int, sink: int) -> None:
    """A diagnostic target: the service's gRPC server set-up and forwarders (gzip), reading
    each request slim and forwarding its bytes (traces and logs): the floor of a Python
    gRPC hop that acknowledges after the forward, as serve's inline mode does."""
    import grpc

    from otel_progress.service.forwarder import Forwarder
    from otel_progress.service.logs import ExportLogsServiceResponse, LogsForwarder
    from otel_progress.service.otlp import ExportTraceServiceResponse, SlimRequest

    SlimLogsRequest = _slim_logs_type()  # (the bench's own: a checkout from before it had one)

    pin(0)
    forwarders = {"traces": Forwarder(f"127.0.0.1:{sink}"), "logs": LogsForwarder(f"127.0.0.1:{sink}")}

    def handler(kind: str, slim: Any, response: Any) -> Any:
        fwd = forwarders[kind]

        def export(raw: bytes, context: grpc.ServicerContext) -> Any:
            slim.FromString(raw)
            result = fwd.forward(raw)
            if not result.ok:
                context.abort(grpc.StatusCode.UNAVAILABLE, result.message)
            return response()

        return grpc.unary_unary_rpc_method_handler(export, request_deserializer=None,
                                                   response_serializer=response.SerializeToString)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=20),
                         options=[("grpc.max_receive_message_length", 64 << 20), ("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((
        grpc.method_handlers_generic_handler("opentelemetry.proto.collector.trace.v1.TraceService",
                                             {"Export": handler("traces", SlimRequest, ExportTraceServiceResponse)}),
        grpc.method_handlers_generic_handler("opentelemetry.proto.collector.logs.v1.LogsService",
                                             {"Export": handler("logs", SlimLogsRequest, ExportLogsServiceResponse)}),
    ))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()  # until SIGTERM


def start_target(target: str, sink: int, workdir: Path, collector: str | None) -> tuple[subprocess.Popen[Any], int]:
    port = free_port()
    if target == "pass-through":
        proc = _spawn([__file__, "--role", "passthrough", "--port", str(port), "--sink", str(sink)])
    elif target == "collector":
        assert collector is not None
        cfg = workdir / f"collector-{port}.yaml"
        cfg.write_text(COLLECTOR_CONFIG.format(port=port, sink=sink))
        proc: subprocess.Popen[Any] = subprocess.Popen(
            ["taskset", "-c", "0", collector, "--config", str(cfg)] if shutil.which("taskset") and
            (os.cpu_count() or 1) > 1 else [collector, "--config", str(cfg)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        mode = "tap" if target.endswith("tap") else "inline"
        endpoint = ["--tap-endpoint", f"127.0.0.1:{sink}"] if mode == "tap" else []
        proc = _spawn(["-c", "import os,sys; os.sched_setaffinity(0,{0}) if os.cpu_count()>1 else None;"
                       " from otel_progress.cli import main; sys.exit(main(sys.argv[1:]))",
                       "serve", "--mode", mode, "--listen", f"127.0.0.1:{port}",
                       "--forward-endpoint", f"127.0.0.1:{sink}", *endpoint,
                       "--health-listen", "", "--log-level", "warning", "--max-receive-mib", "64"],
                      stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, port


def measure(target: str, method: str, requests_file: str, units: int, warm_units: int, sink: Sink,
            opts: argparse.Namespace, workdir: Path, collector: str | None, forwards: bool) -> dict[str, Any]:
    """One target, one load: CPU seconds per unit (span or record) and the rate reached."""
    proc, port = start_target(target, sink.port, workdir, collector)
    client = None
    try:
        base_spans, base_records = sink.count()
        client = _spawn([__file__, "--role", "client", "--port", str(port), "--requests-file", requests_file,
                         "--method", method, "--rate", str(opts.rate), "--warmup", str(opts.warmup_requests),
                         "--concurrency", str(opts.concurrency)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert client.stdin is not None and client.stdout is not None
        if client.stdout.readline().strip() != "warm":
            raise RuntimeError("the client did not warm up")
        logs = method == LOGS_METHOD
        if forwards:
            sink.wait_for(base_spans + (0 if logs else warm_units), base_records + (warm_units if logs else 0))
        time.sleep(0.3)
        before_sink = sink.count()
        cpu0 = cpu_seconds(proc.pid)
        t0 = time.monotonic()
        client.stdin.write("go\n")
        client.stdin.flush()
        result = json.loads(client.stdout.readline())
        if forwards:
            sink.wait_for(before_sink[0] + (0 if logs else units), before_sink[1] + (units if logs else 0))
        cpu1 = cpu_seconds(proc.pid)
        wall = time.monotonic() - t0
        sent = result["units"]
        return {"cpu_us": (cpu1 - cpu0) / max(1, sent) * 1e6, "rate": sent / max(1e-9, result["seconds"]),
                "errors": result["errors"], "units": sent, "wall": wall, "cpu_share": (cpu1 - cpu0) / wall}
    finally:
        if client is not None:
            stop_process(client)
        stop_process(proc)


def _null_engine() -> Any:
    """An engine that finds nothing at no cost: the service's work without the engine's."""
    from otel_progress import Config, ProgressEngine

    class NullEngine(ProgressEngine):
        def observe(self, call: Any, flush: bool = False) -> list[Any]:
            return []

        def flush(self, *args: Any, **kwargs: Any) -> list[Any]:
            return []

        def record_tokens(self, *args: Any, **kwargs: Any) -> None:
            return None

        def run_state(self, *args: Any, **kwargs: Any) -> None:
            return None

        def end_run(self, *args: Any, **kwargs: Any) -> None:
            return None

        def end_trace(self, *args: Any, **kwargs: Any) -> list[Any]:
            return []

    return NullEngine(Config())


def in_process(requests: list[tuple[bytes, int]], warmup: int, mode: str, null: bool = False) -> float:
    """The service's work on the requests in this process, without gRPC: the detector's
    ``process`` and the annotation (inline) or the annotation spans (tap); CPU
    microseconds per span. ``null``: with an engine that finds nothing at no cost."""
    from otel_progress import Config, ProgressEngine
    from otel_progress.service import annotate
    from otel_progress.service.detector import BatchDetector

    detector = BatchDetector(_null_engine() if null else ProgressEngine(Config()))
    gc.collect()
    gc.freeze()  # as otel-progress serve tunes its process's collector (service.run._tune_gc)
    thresholds = gc.get_threshold()
    gc.set_threshold(10_000, 10, 10)

    def run(batch: list[tuple[bytes, int]]) -> None:
        for raw, _n in batch:
            result = detector.process(raw)
            if mode == "inline" and result.placements:
                annotate.annotated_request(raw, result.placements)
            elif mode == "tap" and result.new_detections:
                annotate.tap_items(raw, result.placements, result.new_detections)

    try:
        run(requests[:warmup])
        spans = sum(n for _, n in requests[warmup:])
        t0 = time.process_time()
        run(requests[warmup:])
        return (time.process_time() - t0) / spans * 1e6
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def breakdown(requests: list[tuple[bytes, int]], warmup: int, rounds: int = 3) -> dict[str, float]:
    """Medians over alternated rounds: serve inline's detection work with the engine and
    with a null engine (the difference: the engine and the annotation of what it found)."""
    real, null = [], []
    for _ in range(rounds):
        real.append(in_process(requests, warmup, "inline"))
        null.append(in_process(requests, warmup, "inline", null=True))
    return {"total_us": statistics.median(real), "rest_us": statistics.median(null)}


def write_requests(path: Path, requests: list[tuple[bytes, int]]) -> None:
    with open(path, "wb") as fh:
        pickle.dump(requests, fh, protocol=pickle.HIGHEST_PROTOCOL)


def trace_load(workload: str, opts: argparse.Namespace) -> tuple[list[tuple[bytes, int]], int, float]:
    """(requests with their span counts, measured spans, tool share) of a workload."""
    from bench.realtraffic import mixed_runs, proto_runs, request_stream

    runs = proto_runs()
    if workload == "mixed":
        runs = mixed_runs(runs, 0.10)
    n = opts.warmup_requests + max(8, int(opts.rate * opts.seconds / opts.spans_per_request))
    stream = request_stream(runs, opts.spans_per_request)
    requests, tools, spans = [], 0, 0
    for i in range(n):
        raw, count, tool = next(stream)
        requests.append((raw, count))
        if i >= opts.warmup_requests:
            spans += count
            tools += tool
    return requests, spans, tools / max(1, spans)


def run_rounds(loads: dict[str, tuple[str, str, int, int]], targets: dict[str, list[str]],
               opts: argparse.Namespace, workdir: Path, collector: str | None) -> dict[str, dict[str, list[Any]]]:
    """workload -> target -> per-round results."""
    sink = Sink()
    out: dict[str, dict[str, list[Any]]] = {w: {t: [] for t in targets[w]} for w in loads}
    try:
        for r in range(opts.rounds):
            for workload, (method, path, units, warm_units) in loads.items():
                names = targets[workload]
                order = names[r % len(names):] + names[:r % len(names)]
                for target in order:
                    res = measure(target, method, path, units, warm_units, sink, opts, workdir, collector,
                                  forwards=not target.endswith("tap"))
                    out[workload][target].append(res)
                    print(f"  round {r + 1} {workload:<6} {target:<10} {res['cpu_us']:8.2f} us CPU per unit"
                          f"  ({res['rate']:,.0f}/s, {res['errors']} errors, CPU {res['cpu_share']:.0%})",
                          flush=True)
    finally:
        sink.close()
    return out


def report(results: dict[str, dict[str, list[Any]]], label: str, goals: dict[str, float]) -> dict[str, float]:
    """Print the medians and ratios; returns target -> median ratio."""
    ratios: dict[str, float] = {}
    for workload, by_target in results.items():
        hop = by_target["collector"]
        for target, rows in by_target.items():
            med = statistics.median(x["cpu_us"] for x in rows)
            if target == "collector":
                print(f"  {workload:<6} {'Collector hop':<16} {med:8.2f} us CPU per {label}")
                continue
            per_round = [x["cpu_us"] / h["cpu_us"] for x, h in zip(rows, hop, strict=True) if h["cpu_us"]]
            ratio = statistics.median(per_round) if per_round else float("nan")
            key = target.replace("serve ", "")
            goal = goals.get(key) if workload in ("agent", "logs") else None
            verdict = "" if goal is None else f"  (goal <= {goal:.2f}x: {'met' if ratio <= goal else 'NOT met'})"
            print(f"  {workload:<6} {target:<16} {med:8.2f} us CPU per {label}   {ratio:5.2f}x the hop{verdict}")
            ratios[f"{workload} {key}"] = ratio
    return ratios


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=("sink", "client", "passthrough"), help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--sink", type=int, help=argparse.SUPPRESS)
    p.add_argument("--control", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--requests-file", help=argparse.SUPPRESS)
    p.add_argument("--method", default=TRACES_METHOD, help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, default=6.0, help="measured seconds per target (default 6)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every target (default 3)")
    p.add_argument("--rate", type=float, default=8000, help="spans per second offered (default 8000)")
    p.add_argument("--warmup-requests", type=int, default=12, help=argparse.SUPPRESS)
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight (default 8)")
    p.add_argument("--spans-per-request", type=int, default=512, help="spans per request (default 512)")
    p.add_argument("--workloads", default="agent,mixed", help="agent, mixed (default both)")
    p.add_argument("--modes", default="inline,tap", help="serve modes (default inline,tap)")
    p.add_argument("--pass-through", action="store_true",
                   help="also measure a Python pass-through hop (slim parse + gzip forward): the gRPC floor")
    opts = p.parse_args()
    if opts.role == "sink":
        role_sink(opts.port, opts.control)
        return 0
    if opts.role == "passthrough":
        role_passthrough(opts.port, opts.sink)
        return 0
    if opts.role == "client":
        role_client(opts.port, opts.requests_file, opts.method, opts.rate, opts.warmup_requests, opts.concurrency)
        return 0

    from bench.realtraffic import traffic_source

    collector = collector_binary()
    if collector is None:
        print("the Collector cannot be built here (Go missing): nothing to compare with", file=sys.stderr)
        return 0
    modes = [m.strip() for m in opts.modes.split(",") if m.strip()]
    workloads = [w.strip() for w in opts.workloads.split(",") if w.strip()]
    print(f"serve vs the Collector hop: {traffic_source()}")
    print(f"{opts.rate:,.0f} spans/s offered, {opts.spans_per_request} spans per request, {opts.concurrency} in"
          f" flight, {opts.seconds:g}s per target, {opts.rounds} rounds; {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="bench-service-") as tmp:
        workdir = Path(tmp)
        loads: dict[str, tuple[str, str, int, int]] = {}
        shares = {}
        for workload in workloads:
            requests, spans, share = trace_load(workload, opts)
            path = workdir / f"{workload}.pickle"
            write_requests(path, requests)
            warm = sum(n for _, n in requests[:opts.warmup_requests])
            loads[workload] = (TRACES_METHOD, str(path), spans, warm)
            shares[workload] = share
            print(f"  {workload}: {spans:,} spans measured, {share:.0%} tool spans,"
                  f" {sum(len(r) for r, _ in requests) / len(requests) / 1024:.0f} KiB per request")
        shares_of = {w: breakdown(pickle.loads((workdir / f"{w}.pickle").read_bytes()), opts.warmup_requests)
                     for w in workloads}
        extra = ["pass-through"] if opts.pass_through else []
        targets = {w: ["collector", *extra, *(f"serve {m}" for m in modes)] for w in workloads}
        results = run_rounds(loads, targets, opts, workdir, collector)
    print()
    report(results, "span", GOALS)
    print("\n  where serve inline's CPU goes (the same requests in one process, without gRPC, with the engine"
          " and with a null engine):")
    for workload, b in shares_of.items():
        inline = results[workload].get("serve inline")
        per_span = statistics.median(x["cpu_us"] for x in inline) if inline else 0.0
        engine = b["total_us"] - b["rest_us"]
        print(f"  {workload}: detection {b['total_us']:.2f} us per span = the engine (and annotating what it"
              f" found) {engine:.2f} + decode and run tracking {b['rest_us']:.2f};"
              f" gRPC, gzip and the rest {max(0.0, per_span - b['total_us']):.2f} (of {per_span:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
