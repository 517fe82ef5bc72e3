"""``otel-progress scan`` over coding agents' OTLP/JSON logs: throughput and memory.

Run: ``python bench/bench_logs.py [--size-mb 20] [--runs-in-flight 200] [--requests 2000]``
(prints its figures; no pass/fail).

It builds (in a temporary directory) a line-delimited OTLP/JSON logs file as a Collector's
file exporter writes it, from the Codex CLI golden capture of tests/coding_agents: the
capture's records cloned into many runs (a fresh ``conversation.id`` each), with
``--runs-in-flight`` runs interleaved, one export request per line. Then it runs
``otel-progress scan --no-progress`` in a fresh process and prints, side by side:

* the scan's throughput beside a plain ``json.loads`` of every line (the floor for any
  reader), as a ratio;
* the scan's peak resident memory (``wait4``) beside a bare interpreter that imported the
  command, and per MB of input (the tracker holds at most ``max_runs`` runs of at most 256
  buffered observations: memory follows the runs in flight, not the file size);
* ``otel-progress serve``'s LogsService/Export (inline, forwarding to a gRPC sink on
  127.0.0.1) beside the same requests sent straight to that sink: requests and log records
  per second, and the ratio (the service's cost per request over a bare gRPC hop).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "coding_agents" / "golden" / "codex-0.171.0-loop.jsonl"


def _requests() -> list[dict]:
    return [json.loads(line) for line in GOLDEN.read_text().splitlines() if line.strip()]


def _with_conversation(request: dict, conversation: str) -> str:
    text = json.dumps(request, separators=(",", ":"))
    return text.replace("01a23128-9b8f-7d63-91ab-f96e27715538", conversation)


def build(path: Path, size_mb: float, in_flight: int) -> tuple[int, int]:
    """Write the file; returns (lines, runs)."""
    requests = _requests()
    limit = int(size_mb * 1024 * 1024)
    written = lines = runs = 0
    with path.open("w") as out:
        while written < limit:
            batch = [str(uuid.uuid4()) for _ in range(in_flight)]
            runs += len(batch)
            for request in requests:  # request i of every run in flight, then request i+1
                for conversation in batch:
                    line = _with_conversation(request, conversation) + "\n"
                    out.write(line)
                    written += len(line)
                    lines += 1
    return lines, runs


def _peak_rss_mb(argv: list[str]) -> tuple[float, float, int]:
    """(seconds, peak RSS in MB, exit status) of a command in a fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def bench_serve(count: int) -> None:
    """LogsService/Export through the service vs straight to the sink (one client thread)."""
    from concurrent import futures

    import grpc
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
        ExportLogsServiceRequest,
        ExportLogsServiceResponse,
    )

    from otel_progress import Config
    from otel_progress.service.options import ServiceConfig
    from otel_progress.service.server import ProgressService

    def b64(node: object) -> object:
        import base64
        if isinstance(node, dict):
            return {k: (base64.b64encode(bytes.fromhex(v)).decode() if k in ("traceId", "spanId") and v else b64(v))
                    for k, v in node.items()}
        if isinstance(node, list):
            return [b64(v) for v in node]
        return node

    template = [json_format.ParseDict(b64(d), ExportLogsServiceRequest(), ignore_unknown_fields=True)
                for d in _requests()]
    requests: list[bytes] = []
    records = 0
    for i in range(count):
        request = template[i % len(template)]
        raw = request.SerializeToString().replace(b"01a23128-9b8f-7d63-91ab-f96e27715538",
                                                  f"{i // len(template):036d}".encode())
        requests.append(raw)
        records += sum(len(sl.log_records) for rl in request.resource_logs for sl in rl.scope_logs)
    sink = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.so_reuseport", 0)])
    sink.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "opentelemetry.proto.collector.logs.v1.LogsService",
        {"Export": grpc.unary_unary_rpc_method_handler(
            lambda raw, ctx: ExportLogsServiceResponse(), request_deserializer=None,
            response_serializer=ExportLogsServiceResponse.SerializeToString)}),))
    port = sink.add_insecure_port("127.0.0.1:0")
    sink.start()
    service = ProgressService(ServiceConfig(listen="127.0.0.1:0", health_listen="", forward_compression="none",
                                            forward_endpoint=f"127.0.0.1:{port}"), Config()).start()
    figures = {}
    try:
        for label, target in (("straight to the sink", port), ("through serve", service.port)):
            with grpc.insecure_channel(f"127.0.0.1:{target}") as channel:
                export = channel.unary_unary("/opentelemetry.proto.collector.logs.v1.LogsService/Export",
                                             request_serializer=lambda b: b, response_deserializer=lambda b: b)
                export(requests[0], timeout=10)
                start = time.perf_counter()
                for raw in requests:
                    export(raw, timeout=10)
                figures[label] = time.perf_counter() - start
    finally:
        service.stop(grace=0.5)
        sink.stop(0)
    base = figures["straight to the sink"]
    print(f"serve: {count:,} LogsService/Export requests ({records:,} records, Codex CLI batches), one client")
    print(f"{'':24}{'req/s':>10}{'records/s':>12}{'ratio':>10}")
    for label, seconds in figures.items():
        print(f"{label:24}{count / seconds:>10.0f}{records / seconds:>12.0f}{seconds / base:>10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=20.0)
    parser.add_argument("--runs-in-flight", type=int, default=200)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    if not GOLDEN.exists():
        print(f"skipped: {GOLDEN} is missing")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "logs.jsonl"
        lines, runs = build(path, args.size_mb, args.runs_in_flight)
        size = path.stat().st_size / 1e6
        start = time.perf_counter()
        with path.open("rb") as fh:
            for line in fh:
                json.loads(line)
        floor = time.perf_counter() - start
        scan_s, scan_mb, code = _peak_rss_mb([sys.executable, "-m", "otel_progress.cli", "scan", "--no-progress",
                                              str(path)])
        _, bare_mb, _ = _peak_rss_mb([sys.executable, "-c", "import otel_progress.cli"])
    print(f"input: {size:.1f} MB, {lines:,} lines, {runs:,} Codex runs ({args.runs_in_flight} in flight)")
    print(f"{'':24}{'seconds':>10}{'MB/s':>10}{'ratio':>10}")
    print(f"{'json.loads floor':24}{floor:>10.2f}{size / floor:>10.1f}{1.0:>10.2f}")
    print(f"{'scan (logs)':24}{scan_s:>10.2f}{size / scan_s:>10.1f}{scan_s / floor:>10.2f}   exit {code}")
    print(f"{'':24}{'peak MB':>10}{'MB/MB in':>10}{'ratio':>10}")
    print(f"{'bare interpreter':24}{bare_mb:>10.1f}{'':>10}{1.0:>10.2f}")
    print(f"{'scan (logs)':24}{scan_mb:>10.1f}{scan_mb / size:>10.2f}{scan_mb / bare_mb:>10.2f}")
    bench_serve(args.requests)


if __name__ == "__main__":
    main()
