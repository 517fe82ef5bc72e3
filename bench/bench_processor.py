"""Per-span cost of the progress processor, measured side by side in one run.

Bare: ``TracerProvider`` + ``BatchSpanProcessor(no-op exporter)``. With:
``TracerProvider`` + ``ProgressSpanProcessor(BatchSpanProcessor(no-op exporter))``.
Rounds alternate between the two so that machine noise hits both; each figure is the
median over rounds of the time per span on the application thread (``perf_counter``)
and of the process CPU time per span (all threads, including the batch worker and the
flush at the end of each round). Workloads:

* ``tool``: ``execute_tool`` spans inside an open ``invoke_agent`` span, arguments
  ~200 B and results ~2 KB of JSON, every result different (a healthy run: the engine
  evaluates every call; a new agent run every 50 calls);
* ``other, in a run``: plain spans (3 attributes) whose parent is an agent span;
* ``other, no run``: plain spans under a plain root span (an HTTP-style trace).

Then the resident memory with 100,000 agent runs in flight (each agent span open, one
tool call ended), in a fresh process per variant.

Run: ``python bench/bench_processor.py [--rounds 9] [--spans 3000] [--no-memory]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

TARGETS = {"tool": 1.15, "other, in a run": 1.02, "other, no run": 1.02}


class NoopExporter(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def make(with_progress: bool) -> tuple[TracerProvider, trace.Tracer]:
    from otel_progress import Config, ProgressSpanProcessor

    batch = BatchSpanProcessor(NoopExporter(), max_queue_size=1 << 16, schedule_delay_millis=100,
                               max_export_batch_size=2048)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(ProgressSpanProcessor(batch, config=Config()) if with_progress else batch)
    return provider, provider.get_tracer("bench")


ARGS = json.dumps({"path": "src/app/exporter.py", "query": "refund policy annual plans " * 3,
                   "options": {"limit": 20, "offset": 0, "fields": ["a", "b", "c"]}})


def _result(i: int) -> str:
    rows = [{"id": f"row-{i}-{k}", "title": f"Document title number {k}", "score": round(k * 0.1, 2),
             "snippet": "lorem ipsum dolor sit amet " * 2} for k in range(14)]
    return json.dumps({"results": rows, "total": 14, "page": i})


RESULTS = [_result(i) for i in range(512)]
PLAIN = {"http.method": "GET", "http.route": "/api/items/{id}", "net.peer.port": 443}


def tool_spans(tracer: trace.Tracer, n: int, offset: int) -> float:
    agent = None
    start = time.perf_counter()
    for i in range(n):
        if i % 50 == 0:
            if agent is not None:
                agent.end()
            agent = tracer.start_span("invoke_agent bench", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"})
        with trace.use_span(agent), tracer.start_as_current_span("execute_tool search_docs", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_docs"}) as span:
            span.set_attribute("gen_ai.tool.call.arguments", ARGS)
            span.set_attribute("gen_ai.tool.call.result", RESULTS[(offset + i) % len(RESULTS)])
    if agent is not None:
        agent.end()
    return time.perf_counter() - start


def other_spans(tracer: trace.Tracer, n: int, in_run: bool) -> float:
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"} if in_run else PLAIN
    with tracer.start_as_current_span("invoke_agent bench" if in_run else "GET /api", attributes=attrs):
        start = time.perf_counter()
        for _ in range(n):
            with tracer.start_as_current_span("work", attributes=PLAIN):
                pass
        return time.perf_counter() - start


def measure(rounds: int, spans: int) -> dict[str, dict[str, float]]:
    setups = {False: make(False), True: make(True)}
    workloads: dict[str, Callable[[trace.Tracer, int, int], float]] = {
        "tool": lambda t, n, r: tool_spans(t, n, r * n),
        "other, in a run": lambda t, n, r: other_spans(t, n, True),
        "other, no run": lambda t, n, r: other_spans(t, n, False),
    }
    out: dict[str, dict[str, float]] = {}
    for name, work in workloads.items():
        n = spans if name != "tool" else max(200, spans // 4)
        wall: dict[bool, list[float]] = {False: [], True: []}
        cpu: dict[bool, list[float]] = {False: [], True: []}
        for flag in (False, True):  # warm-up
            work(setups[flag][1], n // 4, 0)
            setups[flag][0].force_flush()
        for r in range(rounds):
            for flag in ((False, True) if r % 2 == 0 else (True, False)):
                provider, tracer = setups[flag]
                gc.collect()
                c0 = time.process_time()
                wall[flag].append(work(tracer, n, r) / n)
                provider.force_flush()
                cpu[flag].append((time.process_time() - c0) / n)
        bare_w, with_w = statistics.median(wall[False]), statistics.median(wall[True])
        bare_c, with_c = statistics.median(cpu[False]), statistics.median(cpu[True])
        out[name] = {"bare_us": bare_w * 1e6, "with_us": with_w * 1e6, "ratio": with_w / bare_w,
                     "bare_cpu_us": bare_c * 1e6, "with_cpu_us": with_c * 1e6, "cpu_ratio": with_c / bare_c,
                     "spans": n}
    for provider, _ in setups.values():
        provider.shutdown()
    return out


def engine_share(calls: int = 400) -> float:
    """Microseconds the engine alone spends on one of the benchmark's tool calls."""
    from otel_progress import Config, ProgressEngine, ToolCall

    engine = ProgressEngine(Config())
    batch = [ToolCall(name="search_docs", arguments=ARGS, result=RESULTS[i % len(RESULTS)],
                      trace_id=f"{i // 50:032x}", span_id=f"{i:016x}", run_id="r",
                      start_ns=i * 1000, end_ns=i * 1000 + 500) for i in range(calls)]
    start = time.perf_counter()
    for call in batch:
        engine.observe(call, flush=True)
    return (time.perf_counter() - start) / calls * 1e6


# -- memory ------------------------------------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_child(with_progress: bool, runs: int) -> dict[str, Any]:
    provider, tracer = make(with_progress)
    gc.collect()
    before = _rss_bytes()
    open_agents = []
    for i in range(runs):
        agent = tracer.start_span("invoke_agent a", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"agent-{i % 50}"})
        open_agents.append(agent)
        with trace.use_span(agent), tracer.start_as_current_span("execute_tool t", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.arguments": json.dumps({"id": i}),
                "gen_ai.tool.call.result": json.dumps({"status": "ok", "n": i})}):
            pass
    provider.force_flush()
    gc.collect()
    after = _rss_bytes()
    info: dict[str, Any] = {"runs": runs, "rss_delta_mb": (after - before) / 2**20}
    if with_progress:
        proc = provider._active_span_processor._span_processors[0]
        info.update(open_spans=proc.open_spans, traces=proc.tracked_traces, engine_runs=proc.active_runs)
    for agent in open_agents:
        agent.end()
    provider.shutdown()
    return info


def memory(runs: int) -> dict[str, dict[str, Any]]:
    out = {}
    for flag in ("bare", "with"):
        proc = subprocess.run([sys.executable, __file__, "--memory-child", flag, "--runs", str(runs)],
                              capture_output=True, text=True, check=True, timeout=600)
        out[flag] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--spans", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--memory-child", choices=("bare", "with"))
    args = parser.parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child == "with", args.runs)))
        return 0
    import opentelemetry.sdk.version as sdk_version

    print(f"otel-progress processor benchmark: opentelemetry-sdk {sdk_version.__version__},"
          f" Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.rounds} rounds (median)")
    results = measure(args.rounds, args.spans)
    print(f"\n{'workload':<17} {'spans':>6} {'bare us':>8} {'with us':>8} {'ratio':>6} {'target':>6}"
          f" {'bare cpu':>9} {'with cpu':>9} {'cpu ratio':>9}")
    for name, r in results.items():
        target = TARGETS[name]
        mark = "ok" if r["ratio"] <= target else "OVER"
        print(f"{name:<17} {r['spans']:>6} {r['bare_us']:>8.2f} {r['with_us']:>8.2f} {r['ratio']:>6.3f}"
              f" {target:>6.2f} {r['bare_cpu_us']:>9.2f} {r['with_cpu_us']:>9.2f} {r['cpu_ratio']:>9.3f}  {mark}")
    share = engine_share()
    print(f"\nengine alone (ProgressEngine.observe on the same tool call): {share:.1f} us per call")
    if not args.no_memory:
        mem = memory(args.runs)
        bare, with_ = mem["bare"], mem["with"]
        print(f"\nresident memory with {args.runs:,} agent runs in flight (open agent span + one tool call):")
        print(f"  bare SDK:        +{bare['rss_delta_mb']:.1f} MiB")
        print(f"  with processor:  +{with_['rss_delta_mb']:.1f} MiB"
              f" (processor + engine: +{with_['rss_delta_mb'] - bare['rss_delta_mb']:.1f} MiB;"
              f" tracked: {with_['open_spans']:,} open spans, {with_['traces']:,} traces,"
              f" {with_['engine_runs']:,} engine runs - capped by max_spans and max_runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
