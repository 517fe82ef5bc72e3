"""Throughput of the whole pipeline with 1 and 2 ``otel-progress serve`` replicas, side by
side in one run (issue 27): spans per second through the real gateway Collector
(collector-config/gateway.yaml, static resolver) -> N replicas -> the real sink Collector
(collector-config/sink.yaml: file archive and detection counters), and the CPU each
component spent per 10,000 spans.

Run: ``python bench/bench_replicas.py [--spans 40000] [--rounds 2] [--topologies 1,2] [--consumers 4,16]
[--state-store]``

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

With ``--state-store`` every configuration is also measured with every replica started with
``--state-store redis://127.0.0.1:PORT/0`` (run state shared between the replicas, issue 27),
in the same rounds and the same rotation as the configurations without it. The benchmark
starts its own redis-server (Debian's, as tests/redis_server.py finds it; ``--save ""
--appendonly no``) on a free loopback port, empties it (FLUSHALL) before every
configuration and stops it at the end; its CPU over the measured interval is a component of
its own (``redis``). The summary adds the ratios with the store / without, per
configuration: throughput, and CPU per 10k spans of the replicas and of the whole pipeline
(redis-server included), each the median of the per-round ratios. The replicas' trace states
written to the store (``progress_service_state_stored``) and store errors over the measured
interval are printed per measurement, so that a store that was not used shows.

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
from tests.service.helpers import free_port, http_get, prom_value, wait_until  # noqa: E402

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


class Redis:
    """Debian's redis-server on a free loopback port, without persistence (as
    tests/redis_server.py and tests/e2e/test_scale.py start it), for the whole run."""

    def __init__(self, workdir: Path) -> None:
        import redis

        from tests.redis_server import _binary

        binary = _binary()
        if binary is None:
            raise SystemExit("--state-store: no redis-server or valkey-server (apt-get install -y redis-server)")
        self.procs = Procs(workdir)
        port = free_port()
        self.proc = self.procs.start("redis", [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                               "--appendonly", "no", "--dir", str(workdir), "--daemonize", "no"])
        self.url = f"redis://127.0.0.1:{port}/0"
        self.client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)

        def up() -> bool:
            try:
                return bool(self.client.ping())
            except (redis.RedisError, OSError):
                return False

        if not wait_until(up, 30, 0.05):
            self.stop()
            raise SystemExit(f"redis-server did not start\n{self.procs.log('redis')}")
        self.version = str(self.client.info("server").get("redis_version", "?"))

    def flush(self) -> None:
        self.client.flushall()

    def stop(self) -> None:
        self.client.close()
        self.procs.stop_all()


def store_counters(pipe: Pipeline, names: tuple[str, ...]) -> dict[str, float]:
    """The replicas' state store counters, summed."""
    out = dict.fromkeys(("stored", "stale", "busy", "continued", "errors"), 0.0)
    for name in names:
        text = http_get(f"http://127.0.0.1:{pipe.port(name + '_health')}/metrics")[1]
        for key in out:
            out[key] += prom_value(text, f"progress_service_state_{key}_total")
    return out


def measure(n: int, otelcol: str, requests_file: Path, warm: int, measured: int, workdir: Path,
            opts: argparse.Namespace, store: Redis | None = None) -> dict[str, Any]:
    """One topology (gateway -> ``n`` replicas -> sink; with ``store``, every replica with
    ``--state-store`` on it), fresh processes: spans/s and CPU seconds per component over
    the measured requests."""
    procs = Procs(workdir)
    pipe = Pipeline(procs, otelcol, workdir)
    pipe.gateway_consumers = opts.queue_consumers
    client: subprocess.Popen[str] | None = None
    names = NAMES[:n]
    serve_args = ["--log-level", "warning", *(["--state-store", store.url] if store is not None else [])]
    try:
        pipe.start_sink()
        for name in names:
            pipe.start_replica(name, serve_args)
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
                **{f"replica {name}": procs.procs[f"replica-{name}"].pid for name in names},
                **({"redis": store.proc.pid} if store is not None else {})}
        counters0 = store_counters(pipe, names) if store is not None else {}
        cpu0 = {k: cpu_seconds(pid) for k, pid in pids.items()}
        t0 = time.monotonic()
        client.stdin.write("go\n")
        client.stdin.flush()
        result = json.loads(client.stdout.readline())
        if not wait_until(lambda: sink_accepted(pipe) >= base + measured, 600, 0.05):
            raise RuntimeError(f"the sink got {sink_accepted(pipe) - base:.0f} of {measured} spans")
        wall = time.monotonic() - t0
        cpu = {k: cpu_seconds(pid) - cpu0[k] for k, pid in pids.items()}
        counters = ({k: v - counters0[k] for k, v in store_counters(pipe, names).items()}
                    if store is not None else {})
        if result["errors"]:
            print(f"  ({result['errors']} requests refused by the gateway)", file=sys.stderr)
        return {"rate": measured / wall, "wall": wall, "cpu": cpu, "busy": {k: v / wall for k, v in cpu.items()},
                "store": counters}
    finally:
        if client is not None:
            stop_process(client)
        procs.stop_all()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spans", type=int, default=40_000,
                   help="measured spans per configuration and round (default 40000)")
    p.add_argument("--warmup-requests", type=int, default=8, help="requests sent before measuring (default 8)")
    p.add_argument("--rounds", type=int, default=2, help="rounds (default 2)")
    p.add_argument("--topologies", default="1,2", help="replica counts, comma-separated (default 1,2)")
    p.add_argument("--consumers", default="4",
                   help="the gateway load balancer's sending_queue.num_consumers, comma-separated: each is measured "
                        "with every topology (default 4, gateway.yaml's)")
    p.add_argument("--state-store", action="store_true",
                   help="also measure every configuration with the replicas on --state-store (a redis-server the "
                        "benchmark starts on a free loopback port, emptied before every configuration), in the "
                        "same rounds; prints the ratios with the store / without")
    opts = p.parse_args()
    otelcol = collector_binary()
    if otelcol is None:
        print("no Collector: needs Go (collector-config/build-collector.sh) or OTELCOL=path", file=sys.stderr)
        return 2
    stores = (False, True) if opts.state_store else (False,)
    configs = [(n, int(c), st) for st in stores for c in opts.consumers.split(",")
               for n in (int(x) for x in opts.topologies.split(","))]
    requests, warm, measured, source = agent_requests(opts.spans, opts.warmup_requests, 512)
    print(f"traffic: {source}; {measured} spans measured per configuration and round, {opts.rounds} rounds")
    results: dict[tuple[int, int, bool], list[dict[str, Any]]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp:
        requests_file = Path(tmp) / "requests.pickle"
        with open(requests_file, "wb") as fh:
            pickle.dump(requests, fh, protocol=pickle.HIGHEST_PROTOCOL)
        redis_server: Redis | None = None
        if opts.state_store:
            (Path(tmp) / "redis").mkdir()
            redis_server = Redis(Path(tmp) / "redis")
            print(f"state store: redis-server {redis_server.version} at {redis_server.url}")
        try:
            for r in range(opts.rounds):
                for n, consumers, st in configs[r % len(configs):] + configs[:r % len(configs)]:
                    workdir = Path(tmp) / f"round{r}-{n}-{consumers}{'-store' if st else ''}"
                    workdir.mkdir()
                    opts.queue_consumers = consumers
                    if redis_server is not None:
                        redis_server.flush()
                    res = measure(n, otelcol, requests_file, warm, measured, workdir, opts,
                                  redis_server if st else None)
                    results[(n, consumers, st)].append(res)
                    cpu = ", ".join(f"{k} {v / measured * 1e4:.2f}" for k, v in res["cpu"].items())
                    busy = ", ".join(f"{k} {v:.0%}" for k, v in res["busy"].items())
                    c = res["store"]
                    written = (f"; store: {c['stored']:.0f} trace states written ({c['stale']:.0f} stale, "
                               f"{c['busy']:.0f} busy, {c['continued']:.0f} continued, {c['errors']:.0f} errors)"
                               if st else "")
                    print(f"round {r + 1}, {n} replica(s), {consumers} consumers"
                          f"{', state store' if st else ''}: {res['rate']:.0f} spans/s ({res['wall']:.1f} s); "
                          f"CPU s per 10k spans: {cpu}; busy (of one core): {busy}{written}; machine "
                          f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        finally:
            if redis_server is not None:
                redis_server.stop()
    print("\nmedians over rounds (CPU seconds per 10,000 spans; replicas summed)")
    print(f"{'replicas':>8} {'consumers':>9} {'store':>5} {'spans/s':>9} {'gateway':>8} {'replicas':>9} "
          f"{'sink':>7} {'redis':>6} {'all':>7}")
    for (n, consumers, st), rows in results.items():
        rate = statistics.median(x["rate"] for x in rows)

        def per10k(key: str, rows: list[dict[str, Any]] = rows) -> float:
            return statistics.median(sum(v for k, v in x["cpu"].items() if k.startswith(key)) / measured * 1e4
                                     for x in rows)

        total = statistics.median(sum(x["cpu"].values()) / measured * 1e4 for x in rows)
        redis_cpu = f"{per10k('redis'):>6.2f}" if st else f"{'-':>6}"
        print(f"{n:>8} {consumers:>9} {'yes' if st else 'no':>5} {rate:>9.0f} {per10k('gateway'):>8.2f} "
              f"{per10k('replica'):>9.2f} {per10k('sink'):>7.2f} {redis_cpu} {total:>7.2f}")

    def rounds(ratios: list[float]) -> str:
        return f"{statistics.median(ratios):.2f}x (rounds: {', '.join(f'{x:.2f}' for x in ratios)})"

    def replicas_cpu(x: dict[str, Any]) -> float:
        return sum(v for k, v in x["cpu"].items() if k.startswith("replica"))

    for st in stores:
        for consumers in sorted({c for _, c, _ in configs}):
            one, two = results.get((1, consumers, st)), results.get((2, consumers, st))
            if one and two:
                ratios = [b["rate"] / a["rate"] for a, b in zip(one, two, strict=True)]
                cpu_ratios = [sum(b["cpu"].values()) / sum(a["cpu"].values()) for a, b in zip(one, two, strict=True)]
                print(f"{consumers} consumers{', state store' if st else ''}, 2 replicas / 1: throughput "
                      f"{rounds(ratios)}; CPU of the whole pipeline per span {statistics.median(cpu_ratios):.2f}x")
    if opts.state_store:
        for n, consumers, st in configs:
            if not st:
                continue
            pairs = list(zip(results[(n, consumers, False)], results[(n, consumers, True)], strict=True))
            through = rounds([b["rate"] / a["rate"] for a, b in pairs])
            replicas = rounds([replicas_cpu(b) / replicas_cpu(a) for a, b in pairs])
            whole = rounds([sum(b["cpu"].values()) / sum(a["cpu"].values()) for a, b in pairs])
            print(f"{n} replica(s), {consumers} consumers, with store / without: throughput {through}; CPU per 10k "
                  f"spans of the replicas {replicas}; of the whole pipeline (redis-server included) {whole}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
