"""Throughput of the whole pipeline with 1 and 2 ``otel-progress serve`` replicas, side by
side in one run (issue 27): spans per second through the real gateway Collector
(collector-config/gateway.yaml, static resolver) -> N replicas -> the real sink Collector
(collector-config/sink.yaml: file archive and detection counters), and the CPU each
component spent per 10,000 spans.

Run: ``python bench/bench_replicas.py [--spans 40000] [--rounds 2] [--topologies 1,2] [--consumers 4,16]``

The processes are the end-to-end test's (tests/e2e/pipeline.py: the same configurations,
environment and serve command line). The load is bench_service's ``agent`` workload (the
real agent runs of ``../shared/realtraces``, else the synthetic scoreboard corpus; 16 runs
in flight, 512 spans a request, every replay under new trace ids so that the gateway spreads
them), sent by bench_service's client process as fast as the gateway takes it, 8 requests
in flight, after a warm-up that is not measured. The measured interval runs from the first
measured request to the moment the sink's receiver has accepted every measured span
(``otelcol_receiver_accepted_spans``); spans/s is the measured spans over that interval.
CPU is ``/proc/<pid>/stat`` user + system time over the same interval, per process. Each
round measures every topology once, in rotating order; the figures are medians over
rounds, and the ratios (2 replicas over 1) are medians of the per-round ratios. With
``--consumers 4,16`` every topology is also measured with the gateway load balancer's
``sending_queue.num_consumers`` at 16 (gateway.yaml ships 4): the batches the gateway has in
flight at once.

On a machine with fewer cores than processes (the development machine: 2 cores for the
client, the two Collectors and the replicas) the replicas compete with the rest for the
cores, so the 2-replica throughput says how the pipeline shares a machine, not how it
scales out on one core per replica; CPU per 10k spans is the figure that carries over.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_service import TRACES_METHOD, collector_binary  # noqa: E402
from bench.service_roles import _spawn, cpu_seconds, stop_process  # noqa: E402
from tests.e2e.conftest import Procs  # noqa: E402
from tests.e2e.pipeline import Pipeline  # noqa: E402
from tests.service.helpers import http_get, prom_value, wait_until  # noqa: E402

NAMES = ("a", "b", "c", "d")


def agent_requests(spans: int, warmup: int, per_request: int) -> tuple[list[tuple[bytes, int]], int, int, str]:
    """(requests with their span counts, warm-up spans, measured spans, what the traffic is)."""
    from bench.realtraffic import proto_runs, request_stream, traffic_source

    stream = request_stream(proto_runs(), per_request)
    requests: list[tuple[bytes, int]] = []
    warm = measured = 0
    for i in range(warmup + max(4, spans // per_request)):
        raw, count, _tool = next(stream)
        requests.append((raw, count))
        if i < warmup:
            warm += count
        else:
            measured += count
    return requests, warm, measured, traffic_source()


def sink_accepted(pipe: Pipeline) -> float:
    text = http_get(f"http://127.0.0.1:{pipe.port('sink_tel')}/metrics")[1]
    return sum(prom_value(text, name, {"receiver": "otlp"}) for name in (
        "otelcol_receiver_accepted_spans_total", "otelcol_receiver_accepted_spans"))


def measure(n: int, otelcol: str, requests_file: Path, warm: int, measured: int, workdir: Path,
            opts: argparse.Namespace) -> dict[str, Any]:
    """One topology (gateway -> ``n`` replicas -> sink), fresh processes: spans/s and CPU
    seconds per component over the measured requests."""
    procs = Procs(workdir)
    pipe = Pipeline(procs, otelcol, workdir)
    pipe.gateway_consumers = opts.queue_consumers
    client: subprocess.Popen[str] | None = None
    names = NAMES[:n]
    try:
        pipe.start_sink()
        for name in names:
            pipe.start_replica(name, ["--log-level", "warning"])
        pipe.wait_ready(names)
        pipe.start_gateway(names, {"OTEL_PROGRESS_LOG_LEVEL": "warn"})
        pipe.wait_collectors()
        if not wait_until(lambda: sink_accepted(pipe) >= 0 and pipe.health_ok("gw_health"), 30, 0.2):
            raise RuntimeError("the pipeline did not start")
        client = _spawn([str(REPO / "bench" / "bench_service.py"), "--role", "client", "--port",
                         str(pipe.port("gw_grpc")), "--requests-file", str(requests_file), "--method", TRACES_METHOD,
                         "--rate", "1e9", "--warmup", str(opts.warmup_requests), "--concurrency", "8"],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert client.stdin is not None and client.stdout is not None
        if client.stdout.readline().strip() != "warm":
            raise RuntimeError("the client did not warm up")
        if not wait_until(lambda: sink_accepted(pipe) >= warm, 120, 0.2):
            raise RuntimeError(f"the sink got {sink_accepted(pipe)} of {warm} warm-up spans")
        time.sleep(1.0)
        base = sink_accepted(pipe)
        pids = {"gateway": procs.procs["gateway"].pid, "sink": procs.procs["sink"].pid,
                **{f"replica {name}": procs.procs[f"replica-{name}"].pid for name in names}}
        cpu0 = {k: cpu_seconds(pid) for k, pid in pids.items()}
        t0 = time.monotonic()
        client.stdin.write("go\n")
        client.stdin.flush()
        result = json.loads(client.stdout.readline())
        if not wait_until(lambda: sink_accepted(pipe) >= base + measured, 600, 0.05):
            raise RuntimeError(f"the sink got {sink_accepted(pipe) - base:.0f} of {measured} spans")
        wall = time.monotonic() - t0
        cpu = {k: cpu_seconds(pid) - cpu0[k] for k, pid in pids.items()}
        if result["errors"]:
            print(f"  ({result['errors']} requests refused by the gateway)", file=sys.stderr)
        return {"rate": measured / wall, "wall": wall, "cpu": cpu, "busy": {k: v / wall for k, v in cpu.items()}}
    finally:
        if client is not None:
            stop_process(client)
        procs.stop_all()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spans", type=int, default=40_000, help="measured spans per topology and round (default 40000)")
    p.add_argument("--warmup-requests", type=int, default=8, help="requests sent before measuring (default 8)")
    p.add_argument("--rounds", type=int, default=2, help="rounds (default 2)")
    p.add_argument("--topologies", default="1,2", help="replica counts, comma-separated (default 1,2)")
    p.add_argument("--consumers", default="4",
                   help="the gateway load balancer's sending_queue.num_consumers, comma-separated: each is measured "
                        "with every topology (default 4, gateway.yaml's)")
    opts = p.parse_args()
    otelcol = collector_binary()
    if otelcol is None:
        print("no Collector: needs Go (collector-config/build-collector.sh) or OTELCOL=path", file=sys.stderr)
        return 2
    configs = [(n, int(c)) for c in opts.consumers.split(",") for n in (int(x) for x in opts.topologies.split(","))]
    requests, warm, measured, source = agent_requests(opts.spans, opts.warmup_requests, 512)
    print(f"traffic: {source}; {measured} spans measured per configuration and round, {opts.rounds} rounds")
    results: dict[tuple[int, int], list[dict[str, Any]]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp:
        requests_file = Path(tmp) / "requests.pickle"
        with open(requests_file, "wb") as fh:
            pickle.dump(requests, fh, protocol=pickle.HIGHEST_PROTOCOL)
        for r in range(opts.rounds):
            for n, consumers in configs[r % len(configs):] + configs[:r % len(configs)]:
                workdir = Path(tmp) / f"round{r}-{n}-{consumers}"
                workdir.mkdir()
                opts.queue_consumers = consumers
                res = measure(n, otelcol, requests_file, warm, measured, workdir, opts)
                results[(n, consumers)].append(res)
                cpu = ", ".join(f"{k} {v / measured * 1e4:.2f}" for k, v in res["cpu"].items())
                busy = ", ".join(f"{k} {v:.0%}" for k, v in res["busy"].items())
                print(f"round {r + 1}, {n} replica(s), {consumers} consumers: {res['rate']:.0f} spans/s "
                      f"({res['wall']:.1f} s); CPU s per 10k spans: {cpu}; busy (of one core): {busy}; machine "
                      f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    print("\nmedians over rounds (CPU seconds per 10,000 spans; replicas summed)")
    print(f"{'replicas':>8} {'consumers':>9} {'spans/s':>9} {'gateway':>8} {'replicas':>9} {'sink':>7} {'all':>7}")
    for (n, consumers), rows in results.items():
        rate = statistics.median(x["rate"] for x in rows)

        def per10k(key: str, rows: list[dict[str, Any]] = rows) -> float:
            return statistics.median(sum(v for k, v in x["cpu"].items() if k.startswith(key)) / measured * 1e4
                                     for x in rows)

        total = statistics.median(sum(x["cpu"].values()) / measured * 1e4 for x in rows)
        print(f"{n:>8} {consumers:>9} {rate:>9.0f} {per10k('gateway'):>8.2f} {per10k('replica'):>9.2f} "
              f"{per10k('sink'):>7.2f} {total:>7.2f}")
    for consumers in sorted({c for _, c in configs}):
        one, two = results.get((1, consumers)), results.get((2, consumers))
        if one and two:
            ratios = [b["rate"] / a["rate"] for a, b in zip(one, two, strict=True)]
            cpu_ratios = [sum(b["cpu"].values()) / sum(a["cpu"].values()) for a, b in zip(one, two, strict=True)]
            print(f"{consumers} consumers, 2 replicas / 1: throughput {statistics.median(ratios):.2f}x (rounds: "
                  f"{', '.join(f'{x:.2f}' for x in ratios)}); CPU of the whole pipeline per span "
                  f"{statistics.median(cpu_ratios):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
