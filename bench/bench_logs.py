"""``otel-progress scan`` over coding agents' OTLP/JSON logs: throughput and memory.

Run: ``python bench/bench_logs.py [--size-mb 20] [--runs-in-flight 200] [--requests 1500]
[--rate 2000] [--rounds 3] [--no-scan]`` (prints its figures beside their goals; no pass/fail).

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
* ``otel-progress serve``'s LogsService/Export, inline and tap, beside the real Collector's
  logs hop (OTLP receiver -> batch -> OTLP exporter; the method of bench_service.py): CPU
  per log record of each, on the same requests (every golden capture of
  tests/coding_agents: Claude Code, Codex CLI, Gemini CLI, Qwen Code, replayed under new
  session and conversation ids, interleaved), and the ratio beside the goal (issue 16:
  <= 1.5x).
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
GOLDEN = REPO / "tests" / "coding_agents" / "golden" / "codex-0.171.0-loop.jsonl"


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


def bench_serve(opts: argparse.Namespace) -> None:
    """LogsService/Export through serve (inline, tap) beside the Collector's logs hop: CPU
    per log record, side by side (see bench_service.py for the method)."""
    from bench.bench_service import (
        LOGS_METHOD,
        collector_binary,
        report,
        run_rounds,
        write_requests,
    )
    from bench.realtraffic import log_requests

    collector = collector_binary()
    if collector is None:
        print("serve: skipped (the Collector cannot be built here: Go missing)")
        return
    requests, _records = log_requests(opts.requests + opts.warmup_requests)
    counted = []
    for raw in requests:
        counted.append((raw, _records_in(raw)))
    warm = sum(n for _, n in counted[:opts.warmup_requests])
    measured = sum(n for _, n in counted[opts.warmup_requests:])
    print(f"\nserve LogsService vs the Collector logs hop: {len(log_captures_names())} coding-agent captures"
          f" (tests/coding_agents/golden) replayed under new session ids, {measured:,} records measured,"
          f" {opts.rate:,.0f} records/s offered, {opts.rounds} rounds")
    opts.seconds = measured / opts.rate
    modes = [m.strip() for m in opts.modes.split(",") if m.strip()]
    with tempfile.TemporaryDirectory(prefix="bench-logs-") as tmp:
        workdir = Path(tmp)
        path = workdir / "logs.pickle"
        write_requests(path, counted)
        extra = ["pass-through"] if opts.pass_through else []
        results = run_rounds({"logs": (LOGS_METHOD, str(path), measured, warm)},
                             {"logs": ["collector", *extra, *(f"serve {m}" for m in modes)]}, opts, workdir,
                             collector)
    print()
    report(results, "record", {"inline": 1.5, "tap": 1.5})


def _records_in(raw: bytes) -> int:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    request = ExportLogsServiceRequest.FromString(raw)
    return sum(len(sl.log_records) for rl in request.resource_logs for sl in rl.scope_logs)


def log_captures_names() -> list[str]:
    from bench.realtraffic import GOLDEN

    return [p.name for p in sorted(GOLDEN.glob("*.jsonl")) if not p.name.endswith(".traces.jsonl")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=20.0)
    parser.add_argument("--runs-in-flight", type=int, default=200)
    parser.add_argument("--requests", type=int, default=1500, help="LogsService requests measured per target")
    parser.add_argument("--rate", type=float, default=2000, help="log records per second offered to serve")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="inline,tap")
    parser.add_argument("--no-scan", action="store_true", help="only the serve figures")
    parser.add_argument("--pass-through", action="store_true",
                        help="also measure a Python pass-through hop (slim parse + gzip forward): the gRPC floor")
    parser.add_argument("--warmup-requests", type=int, default=40, help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=8, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.no_scan:
        bench_serve(args)
        return
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
    bench_serve(args)


if __name__ == "__main__":
    main()
