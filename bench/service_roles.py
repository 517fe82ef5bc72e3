"""The processes of bench_service.py (and of bench_logs.py, bench_service_limits.py): the
sink, the client that sends the load, the Python pass-through hop, ``serve`` with a null
engine (the floor of serve's own work), and the stage profile of one source tree; with the
helpers they share (ports, CPU time, process control).

Nothing here imports ``otel_progress`` at module level: a role that runs a given source
tree (``BENCH_TREE``, a checkout of an earlier commit) puts it first on ``sys.path``
before importing it, so that a before/after comparison runs each tree's own code.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from concurrent import futures
from contextlib import closing
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH_SERVICE = REPO / "bench" / "bench_service.py"  # the script whose --role runs each process
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


def _spawn(args: list[str], tree: Path = REPO, **kw: Any) -> subprocess.Popen[str]:
    """A Python process with ``tree`` first on its path (``BENCH_TREE`` says which)."""
    env = {**os.environ, "PYTHONPATH": str(tree) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "BENCH_TREE": str(tree)}
    return subprocess.Popen([sys.executable, *args], env=env, text=True, **kw)


def use_tree() -> str:
    """Put ``BENCH_TREE`` (default: this checkout) first on ``sys.path`` and check that
    ``otel_progress`` is imported from it; returns the tree."""
    tree = os.environ.get("BENCH_TREE", str(REPO))
    sys.path.insert(0, tree)
    import otel_progress

    where = Path(otel_progress.__file__).resolve()
    if not where.is_relative_to(Path(tree).resolve()):
        raise RuntimeError(f"otel_progress imported from {where}, not from the tree {tree}")
    return tree


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
        self.proc = _spawn([str(BENCH_SERVICE), "--role", "sink", "--port", str(self.port), "--control"],
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



# -- serve with a null engine, and the stage profile -------------------------------------


def role_serve(argv: list[str], null: bool) -> int:
    """``otel-progress serve`` of ``BENCH_TREE``, on CPU 0 (as the other targets); with
    ``null``, its engine replaced by one that finds nothing at no cost: serve's own work
    (gRPC, gzip, decoding, run tracking, forwarding) without the engine's."""
    use_tree()
    pin(0)
    if null:
        from otel_progress.service import server

        engine = type(_null_engine())
        server.ProgressEngine = engine  # type: ignore[attr-defined,misc]
    from otel_progress.cli import main

    return int(main(argv) or 0)


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


def decode_stage(requests: list[tuple[bytes, int]], warmup: int) -> float:
    """The decode stage alone (service/decode.py: the request read slim, the spans that
    may be GenAI decoded into records, the lineage's ids): CPU microseconds per span."""
    from otel_progress.service import decode

    def run(batch: list[tuple[bytes, int]]) -> None:
        for raw, _n in batch:
            request = decode.read_request(raw)
            request.trace_ids()
            items, others, _unreadable = decode.decode_spans(request)
            decode.lineage_spans(items, others)

    run(requests[:warmup])
    spans = sum(n for _, n in requests[warmup:])
    t0 = time.process_time()
    run(requests[warmup:])
    return (time.process_time() - t0) / spans * 1e6


def gzip_stage(requests: list[tuple[bytes, int]], warmup: int) -> tuple[float, float]:
    """What grpcio's core does to a request's bytes on this hop, with the same zlib
    settings (gzip, level 6, ``Z_DEFAULT_COMPRESSION``): ``(gunzip of the request
    received, gzip of the forward)``, CPU microseconds per span."""
    measured = requests[warmup:]
    spans = sum(n for _, n in measured)
    t0 = time.process_time()
    packed = []
    for raw, _n in measured:
        z = zlib.compressobj(6, zlib.DEFLATED, 31)
        packed.append(z.compress(raw) + z.flush())
    t1 = time.process_time()
    for blob in packed:
        zlib.decompress(blob, 31)
    t2 = time.process_time()
    return (t2 - t1) / spans * 1e6, (t1 - t0) / spans * 1e6


def role_stages(requests_file: str, warmup: int, rounds: int) -> None:
    """Prints (one JSON line) where serve inline's in-process CPU goes, for ``BENCH_TREE``:
    medians over alternated rounds of the detection with the engine (and the annotation),
    with a null engine, and of the decode stage alone; microseconds per span."""
    import statistics

    use_tree()
    pin(0)
    with open(requests_file, "rb") as fh:
        requests: list[tuple[bytes, int]] = pickle.load(fh)
    real, null, dec = [], [], []
    for _ in range(rounds):
        real.append(in_process(requests, warmup, "inline"))
        null.append(in_process(requests, warmup, "inline", null=True))
        dec.append(decode_stage(requests, warmup))
    print(json.dumps({"total_us": statistics.median(real), "rest_us": statistics.median(null),
                      "decode_us": statistics.median(dec)}), flush=True)
