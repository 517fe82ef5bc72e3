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

With ``--baseline-tree PATH`` (a checkout of an earlier commit: ``git worktree add
/tmp/serve-before <commit>``) every serve target is measured from that tree too, in the same
rounds (``serve inline (before)``), and a before/after table ends the report. ``--floors``
adds two diagnostic targets: the pass-through hop (the service's gRPC server and forwarder,
each request read slim and forwarded: the floor of a Python hop) and ``serve inline, null
engine`` (serve with an engine that finds nothing at no cost: its own work without the
engine's). The stage profile (``where serve inline's CPU goes``) replays the same requests in
one process per tree: gunzip of the request and gzip of the forward (zlib with grpcio's
settings), the decode stage, run tracking (with a null engine, minus decoding), the engine
and annotation (minus the null engine); the rest of serve inline's figure is gRPC and threads.

The processes it starts are in bench/service_roles.py; ``--role sink`` is the sink alone
(bench_service_limits uses it).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.service_perf import PerfRecording, perf_available, report_lines  # noqa: E402
from bench.service_roles import (  # noqa: E402
    Sink,
    _spawn,
    cpu_seconds,
    free_port,
    gzip_stage,
    role_client,
    role_passthrough,
    role_serve,
    role_sink,
    role_stages,
    stop_process,
    wait_port,
)

__all__ = ["LOGS_METHOD", "TRACES_METHOD", "collector_binary", "free_port", "measure", "report", "run_rounds",
           "stop_process", "wait_port", "write_requests"]

TRACES_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
LOGS_METHOD = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
GOALS = {"inline": 1.5, "tap": 1.1, "logs inline": 1.5, "logs tap": 1.5}
BEFORE = " (before)"
NULL_ENGINE = "serve inline, null engine"


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



def _mode(target: str) -> str:
    """``inline`` or ``tap`` for a serve target (its name without the tree's suffix)."""
    return "tap" if target.removesuffix(BEFORE).endswith("tap") else "inline"


def start_target(target: str, sink: int, workdir: Path, collector: str | None,
                 baseline: Path | None = None) -> tuple[subprocess.Popen[Any], int]:
    """A target's process and port: the Collector, the pass-through, or ``otel-progress
    serve`` (of ``baseline`` for a ``(before)`` target; with a null engine for
    :data:`NULL_ENGINE`)."""
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
        mode = _mode(target)
        endpoint = ["--tap-endpoint", f"127.0.0.1:{sink}"] if mode == "tap" else []
        tree = baseline if target.endswith(BEFORE) and baseline is not None else REPO
        role = "serve-null" if target == NULL_ENGINE else "serve"
        proc = _spawn([__file__, "--role", role, "--",
                       "serve", "--mode", mode, "--listen", f"127.0.0.1:{port}",
                       "--forward-endpoint", f"127.0.0.1:{sink}", *endpoint,
                       "--health-listen", "", "--log-level", "warning", "--max-receive-mib", "64"],
                      tree=tree, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, port


def measure(target: str, method: str, requests_file: str, units: int, warm_units: int, sink: Sink,
            opts: argparse.Namespace, workdir: Path, collector: str | None, forwards: bool,
            perf: Path | None = None) -> dict[str, Any]:
    """One target, one load: CPU seconds per unit (span or record) and the rate reached
    (``perf``: a native profile of the target recorded there while the measured requests
    are handled)."""
    proc, port = start_target(target, sink.port, workdir, collector, getattr(opts, "baseline_tree", None))
    client = None
    recording = PerfRecording(proc.pid, perf) if perf is not None else None
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
        if recording is not None:
            recording.start()
        cpu0 = cpu_seconds(proc.pid)
        t0 = time.monotonic()
        client.stdin.write("go\n")
        client.stdin.flush()
        result = json.loads(client.stdout.readline())
        if forwards:
            sink.wait_for(before_sink[0] + (0 if logs else units), before_sink[1] + (units if logs else 0))
        cpu1 = cpu_seconds(proc.pid)
        wall = time.monotonic() - t0
        if recording is not None:
            recording.stop()
        sent = result["units"]
        return {"cpu_us": (cpu1 - cpu0) / max(1, sent) * 1e6, "rate": sent / max(1e-9, result["seconds"]),
                "errors": result["errors"], "units": sent, "wall": wall, "cpu_share": (cpu1 - cpu0) / wall}
    finally:
        if client is not None:
            stop_process(client)
        stop_process(proc)



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
                                  forwards=target in ("collector", "pass-through") or _mode(target) != "tap")
                    out[workload][target].append(res)
                    print(f"  round {r + 1} {workload:<6} {target:<25} {res['cpu_us']:8.2f} us CPU per unit"
                          f"  ({res['rate']:,.0f}/s, {res['errors']} errors, CPU {res['cpu_share']:.0%})",
                          flush=True)
    finally:
        sink.close()
    return out


def report(results: dict[str, dict[str, list[Any]]], label: str, goals: dict[str, float]) -> dict[str, float]:
    """Print the medians and ratios, each serve mode's beside its goal; returns
    ``"<workload> <target>"`` -> median ratio (``"<workload> hop"``: the hop's CPU per unit)."""
    ratios: dict[str, float] = {}
    for workload, by_target in results.items():
        hop = by_target["collector"]
        for target, rows in by_target.items():
            med = statistics.median(x["cpu_us"] for x in rows)
            if target == "collector":
                print(f"  {workload:<6} {'Collector hop':<26} {med:8.2f} us CPU per {label}")
                ratios[f"{workload} hop"] = med
                continue
            per_round = [x["cpu_us"] / h["cpu_us"] for x, h in zip(rows, hop, strict=True) if h["cpu_us"]]
            ratio = statistics.median(per_round) if per_round else float("nan")
            key = target.replace("serve ", "")
            goal = goals.get(key.removesuffix(BEFORE)) if workload in ("agent", "logs") else None
            verdict = "" if goal is None else f"  (goal <= {goal:.2f}x: {'met' if ratio <= goal else 'NOT met'})"
            print(f"  {workload:<6} {target:<26} {med:8.2f} us CPU per {label}   {ratio:5.2f}x the hop{verdict}")
            ratios[f"{workload} {key}"] = ratio
            ratios[f"{workload} {key} us"] = med
    return ratios


def stages(workdir: Path, workloads: list[str], opts: argparse.Namespace) -> dict[str, dict[str, dict[str, float]]]:
    """tree -> workload -> the stage profile (service_roles.role_stages, in a fresh process
    per tree and workload; gzip and gunzip measured here, the same for both trees)."""
    trees = {"after": REPO, **({"before": opts.baseline_tree} if opts.baseline_tree else {})}
    out: dict[str, dict[str, dict[str, float]]] = {name: {} for name in trees}
    for workload in workloads:
        path = workdir / f"{workload}.pickle"
        requests = pickle.loads(path.read_bytes())
        gunzip, gzip = gzip_stage(requests, opts.warmup_requests)
        for name, tree in trees.items():
            proc = _spawn([__file__, "--role", "stages", "--requests-file", str(path),
                           "--warmup-requests", str(opts.warmup_requests)], tree=tree, stdout=subprocess.PIPE)
            stdout, _ = proc.communicate(timeout=1800)
            out[name][workload] = {**json.loads(stdout.strip().splitlines()[-1]), "gunzip_us": gunzip,
                                   "gzip_us": gzip}
    return out


def print_stages(profile: dict[str, dict[str, dict[str, float]]], ratios: dict[str, float]) -> None:
    """Where serve inline's CPU goes, stage by stage, per tree and workload."""
    print("\n  where serve inline's CPU goes, us per span (the same requests in one process, without gRPC;"
          " gRPC and threads: the rest of serve inline's figure):")
    print(f"  {'':<15} {'gunzip':>7} {'decode':>7} {'runs':>7} {'engine':>7} {'gzip':>7} {'rest':>7} {'serve':>7}")
    for tree, by_workload in profile.items():
        for workload, b in by_workload.items():
            serve = ratios.get(f"{workload} inline{BEFORE if tree == 'before' else ''} us", float("nan"))
            runs = b["rest_us"] - b["decode_us"]
            engine = b["total_us"] - b["rest_us"]
            rest = serve - b["total_us"] - b["gunzip_us"] - b["gzip_us"]
            print(f"  {tree + ' ' + workload:<15} {b['gunzip_us']:7.2f} {b['decode_us']:7.2f} {runs:7.2f}"
                  f" {engine:7.2f} {b['gzip_us']:7.2f} {rest:7.2f} {serve:7.2f}")


def before_after(ratios: dict[str, float], profile: dict[str, dict[str, dict[str, float]]],
                 workloads: list[str], modes: list[str]) -> None:
    """The before/after table: each figure beside its goal, measured in this run."""
    print("\n  before / after (this run; ratios: medians of the per-round ratios to the Collector hop):")
    print(f"  {'figure':<44} {'goal':>8} {'before':>9} {'after':>9}")
    rows: list[tuple[str, str, float, float]] = []
    for workload in workloads:
        for mode in modes:
            goal = f"<= {GOALS[mode]:.2f}x" if workload == "agent" else ""
            rows.append((f"{workload}: serve {mode} / Collector hop", goal,
                         ratios.get(f"{workload} {mode}{BEFORE}", float("nan")),
                         ratios.get(f"{workload} {mode}", float("nan"))))
        for label, key in (("detection in one process, us/span", "total_us"),
                           ("· decoding and run tracking (null engine)", "rest_us"),
                           ("· · the decode stage", "decode_us")):
            rows.append((f"{workload}: {label}", "", profile.get("before", {}).get(workload, {}).get(key, float("nan")),
                         profile["after"][workload][key]))
    for name, goal, before, after in rows:
        ratio = name.endswith("hop")
        fmt = (lambda v: f"{v:8.2f}x") if ratio else (lambda v: f"{v:9.2f}")
        print(f"  {name:<44} {goal:>8} {fmt(before)} {fmt(after)}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=("sink", "client", "passthrough", "serve", "serve-null", "stages"),
                   help=argparse.SUPPRESS)
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
    p.add_argument("--floors", action="store_true",
                   help="the pass-through hop and serve inline with a null engine (diagnostic targets)")
    p.add_argument("--perf", action="store_true",
                   help="then a native profile (Linux perf) of serve inline on agent traffic, by library")
    p.add_argument("--baseline-tree", type=Path,
                   help="a checkout of an earlier commit: its serve measured in the same rounds (before/after)")
    opts, rest = p.parse_known_args()
    if opts.role in ("serve", "serve-null"):
        return role_serve([a for a in rest if a != "--"], null=opts.role == "serve-null")
    if rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    if opts.role == "sink":
        role_sink(opts.port, opts.control)
        return 0
    if opts.role == "passthrough":
        role_passthrough(opts.port, opts.sink)
        return 0
    if opts.role == "client":
        role_client(opts.port, opts.requests_file, opts.method, opts.rate, opts.warmup_requests, opts.concurrency)
        return 0
    if opts.role == "stages":
        role_stages(opts.requests_file, opts.warmup_requests, 3)
        return 0
    return compare(opts)


def _describe(tree: Path) -> str:
    proc = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h %s"], capture_output=True, text=True,
                          check=False)
    return f"{tree} at {proc.stdout.strip()[:70] or 'unknown commit'}"


def compare(opts: argparse.Namespace) -> int:
    """The side-by-side run and its report."""
    from bench.realtraffic import traffic_source

    collector = collector_binary()
    if collector is None:
        print("the Collector cannot be built here (Go missing): nothing to compare with", file=sys.stderr)
        return 0
    if opts.baseline_tree is not None:
        opts.baseline_tree = opts.baseline_tree.resolve()
    modes = [m.strip() for m in opts.modes.split(",") if m.strip()]
    workloads = [w.strip() for w in opts.workloads.split(",") if w.strip()]
    print(f"serve vs the Collector hop: {traffic_source()}")
    print(f"{opts.rate:,.0f} spans/s offered, {opts.spans_per_request} spans per request, {opts.concurrency} in"
          f" flight, {opts.seconds:g}s per target, {opts.rounds} rounds; {os.cpu_count()} CPUs")
    print(f"  after: {_describe(REPO)}")
    if opts.baseline_tree is not None:
        print(f"  before: {_describe(opts.baseline_tree)}")
    with tempfile.TemporaryDirectory(prefix="bench-service-") as tmp:
        workdir = Path(tmp)
        loads: dict[str, tuple[str, str, int, int]] = {}
        for workload in workloads:
            requests, spans, share = trace_load(workload, opts)
            path = workdir / f"{workload}.pickle"
            write_requests(path, requests)
            warm = sum(n for _, n in requests[:opts.warmup_requests])
            loads[workload] = (TRACES_METHOD, str(path), spans, warm)
            print(f"  {workload}: {spans:,} spans measured, {share:.0%} tool spans,"
                  f" {sum(len(r) for r, _ in requests) / len(requests) / 1024:.0f} KiB per request")
        profile = stages(workdir, workloads, opts)
        extra = ["pass-through"] if opts.pass_through or opts.floors else []
        extra += [NULL_ENGINE] if opts.floors and "inline" in modes else []
        serves = [f"serve {m}" for m in modes]
        serves += [f"serve {m}{BEFORE}" for m in modes] if opts.baseline_tree is not None else []
        targets = {w: ["collector", *extra, *serves] for w in workloads}
        results = run_rounds(loads, targets, opts, workdir, collector)
        profiled = native_profile(loads, opts, workdir, collector) if opts.perf else []
    print()
    ratios = report(results, "span", GOALS)
    print_stages(profile, ratios)
    if opts.baseline_tree is not None:
        before_after(ratios, profile, workloads, modes)
    if profiled:
        print("\n  serve inline on agent traffic, by library (perf, one more measured run):")
        print("\n".join(profiled))
    return 0


def native_profile(loads: dict[str, tuple[str, str, int, int]], opts: argparse.Namespace, workdir: Path,
                   collector: str | None) -> list[str]:
    """One more run of serve inline on agent traffic under ``perf record``: the report's
    lines (bench/service_perf.py), or why there is none."""
    if "agent" not in loads:
        return ["  (no agent workload)"]
    if not perf_available():
        return ["  (perf is missing or not permitted here: no native profile)"]
    method, path, units, warm = loads["agent"]
    sink = Sink()
    try:
        out = workdir / "serve-inline.perf"
        res = measure("serve inline", method, path, units, warm, sink, opts, workdir, collector, True, perf=out)
    finally:
        sink.close()
    return [f"  ({res['cpu_us']:.2f} us CPU per span in this run)", *report_lines(out, res["cpu_us"])]


if __name__ == "__main__":
    sys.exit(main())
