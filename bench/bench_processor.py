"""Per-span cost of the progress processor, both analysis modes side by side in one run.

Bare: ``TracerProvider`` + ``BatchSpanProcessor(no-op exporter)``. Inline and background:
``TracerProvider`` + ``ProgressSpanProcessor(BatchSpanProcessor(no-op exporter),
analysis=...)``. Rounds rotate the order of the three so that machine noise hits all of
them; each figure is the median over rounds, per span, of:

* ``app CPU``: the CPU time of the application thread while it makes the spans
  (``time.thread_time``): what ``span.end()`` and ``start_span`` cost the application;
* ``app wall``: the wall time of the same loop (``perf_counter``). In this tight loop
  the background worker competes for the GIL with the application thread, so the wall
  time also carries part of the worker's CPU; an agent that waits on model and tool
  calls leaves the worker those waits;
* ``total CPU``: the process CPU time (all threads: the application, the analysis
  worker, the batch exporter's worker), from the first span to the end of a
  ``force_flush`` that waits for both workers: what the machine pays in all.

Workloads:

* ``tool``: ``execute_tool`` spans inside an open ``invoke_agent`` span, with the
  attributes, arguments, results and failures of the real runs' tool calls
  (``../shared/realtraces``, in run order; where absent, synthetic ones: arguments ~200 B
  and results ~2 KB of JSON, every result different), a new agent run every 50 calls, in
  a tight loop: the worst case for background analysis, whose worker then runs alongside
  the application. Its ``total CPU`` is the process CPU per tool span, whose goal
  (issue 16) is at most twice the bare SDK's;
* ``tool, 1 ms I/O``: the same with 1 ms of waiting (``time.sleep``, the tool call
  itself) before each span ends, as in an agent: the worker runs in the waits. Its wall
  time is mostly the waits and is not shown; the CPU the application thread spends
  inside ``time.sleep`` (kernel timer and scheduler work, tens of microseconds on a
  virtual machine) is not the spans' cost: it is taken out of ``app CPU`` and ``total
  CPU`` and shown on its own (``in waits``);
* ``other, in a run``: plain spans (3 attributes) whose parent is an agent span;
* ``other, no run``: plain spans under a plain root span (an HTTP-style trace).

Then the hook latency (from the call to ``span.end()`` of the tool span that brings a
detection to the ``on_detection`` call) for an agent that waits ~1 ms on each tool call
and for a tight loop, and the resident memory with 100,000 agent runs in flight (each
agent span open, one tool call ended), in a fresh process per setup.

Then the resident memory with spans that start and never end (300,000 plain root spans;
200,000 ``invoke_agent`` spans with one tool call each), bare and with the processor,
each in a fresh process: what the processor holds for them is bounded by its tables'
limits, not by the number of spans.

Run: ``python bench/bench_processor.py [--rounds 9] [--spans 3000] [--no-memory]``
(``--only-never-ended`` for the last figures alone, ``--only-memory`` for every memory figure).
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# Goals: the application thread's CPU (app CPU, app wall) beside the bare SDK; and (issue 16)
# the process CPU per tool span at most twice a bare tool span's.
TARGETS = {"tool": 1.15, "tool, 1 ms I/O": 1.15, "other, in a run": 1.02, "other, no run": 1.02}
TOTAL_TARGETS = {"tool": 2.0, "tool, 1 ms I/O": 2.0}
SETUPS = ("bare", "inline", "background")


class NoopExporter(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def make(setup: str, on_detection: Callable[[Any], Any] | None = None) -> tuple[TracerProvider, trace.Tracer]:
    from otel_progress import Config, ProgressSpanProcessor

    batch = BatchSpanProcessor(NoopExporter(), max_queue_size=1 << 16, schedule_delay_millis=100,
                               max_export_batch_size=2048)
    provider = TracerProvider(shutdown_on_exit=False)
    if setup == "bare":
        provider.add_span_processor(batch)
    else:
        provider.add_span_processor(ProgressSpanProcessor(batch, config=Config(), analysis=setup,
                                                          on_detection=on_detection))
    return provider, provider.get_tracer("bench")


ARGS = json.dumps({"path": "src/app/exporter.py", "query": "refund policy annual plans " * 3,
                   "options": {"limit": 20, "offset": 0, "fields": ["a", "b", "c"]}})


def _result(i: int) -> str:
    rows = [{"id": f"row-{i}-{k}", "title": f"Document title number {k}", "score": round(k * 0.1, 2),
             "snippet": "lorem ipsum dolor sit amet " * 2} for k in range(14)]
    return json.dumps({"results": rows, "total": 14, "page": i})


RESULTS = [_result(i) for i in range(512)]


def _real_tool_spans() -> list[tuple[str, dict[str, Any], bool]]:
    """The real runs' tool spans (name, attributes, failed), else synthetic ones."""
    try:
        from bench.realtraffic import real_files, real_tool_spans
    except ImportError:  # run from elsewhere
        return []
    return real_tool_spans() if real_files() else []


REAL = _real_tool_spans()
PLAIN = {"http.method": "GET", "http.route": "/api/items/{id}", "net.peer.port": 443}


def tool_spans(tracer: trace.Tracer, n: int, offset: int, wait: float = 0.0) -> tuple[float, float]:
    """Make ``n`` tool spans; (wall seconds, CPU seconds the thread spent in the waits)."""
    agent = None
    waits = 0.0
    start = time.perf_counter()
    for i in range(n):
        if i % 50 == 0:
            if agent is not None:
                agent.end()
            agent = tracer.start_span("invoke_agent bench", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"})
        if REAL:
            name, attrs, failed = REAL[(offset + i) % len(REAL)]
        else:
            name, failed = "execute_tool search_docs", False
            attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_docs",
                     "gen_ai.tool.call.arguments": ARGS,
                     "gen_ai.tool.call.result": RESULTS[(offset + i) % len(RESULTS)]}
        start_attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": attrs.get("gen_ai.tool.name", "")}
        with trace.use_span(agent), tracer.start_as_current_span(name, attributes=start_attrs) as span:
            span.set_attributes(attrs)
            if failed:
                span.set_status(trace.StatusCode.ERROR)
            if wait:
                w0 = time.thread_time()
                time.sleep(wait)
                waits += time.thread_time() - w0
    if agent is not None:
        agent.end()
    return time.perf_counter() - start, waits


def other_spans(tracer: trace.Tracer, n: int, in_run: bool) -> tuple[float, float]:
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"} if in_run else PLAIN
    with tracer.start_as_current_span("invoke_agent bench" if in_run else "GET /api", attributes=attrs):
        start = time.perf_counter()
        for _ in range(n):
            with tracer.start_as_current_span("work", attributes=PLAIN):
                pass
        return time.perf_counter() - start, 0.0


def measure(rounds: int, spans: int) -> dict[str, dict[str, dict[str, float]]]:
    """workload -> setup -> {"app": .., "wall": .., "cpu": ..} in microseconds per span."""
    setups = {name: make(name) for name in SETUPS}
    workloads: dict[str, Callable[[trace.Tracer, int, int], tuple[float, float]]] = {
        "tool": lambda t, n, r: tool_spans(t, n, r * n),
        "tool, 1 ms I/O": lambda t, n, r: tool_spans(t, n, r * n, wait=0.001),
        "other, in a run": lambda t, n, r: other_spans(t, n, True),
        "other, no run": lambda t, n, r: other_spans(t, n, False),
    }
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, work in workloads.items():
        n = spans if not name.startswith("tool") else max(200, spans // 4 if name == "tool" else spans // 8)
        samples: dict[str, dict[str, list[float]]] = {s: {"app": [], "wall": [], "cpu": [], "waits": []}
                                                     for s in SETUPS}
        for setup in SETUPS:  # warm-up
            work(setups[setup][1], n // 4, 0)
            setups[setup][0].force_flush()
        for r in range(rounds):
            order = SETUPS[r % 3:] + SETUPS[:r % 3]
            for setup in order:
                provider, tracer = setups[setup]
                gc.collect()
                c0, t0 = time.process_time(), time.thread_time()
                wall, waits = work(tracer, n, r)
                t1 = time.thread_time()
                provider.force_flush()
                c1 = time.process_time()
                got = samples[setup]
                got["app"].append((t1 - t0 - waits) / n * 1e6)
                got["wall"].append(wall / n * 1e6)
                got["cpu"].append((c1 - c0 - waits) / n * 1e6)
                got["waits"].append(waits / n * 1e6)
        out[name] = {s: {k: statistics.median(v) for k, v in samples[s].items()} for s in SETUPS}
        out[name]["bare"]["spans"] = n
    for provider, _ in setups.values():
        provider.shutdown()
    return out


def hook_latency(setup: str, paced: bool, runs: int = 40) -> list[float]:
    """Microseconds from the call to ``end()`` of a tool span that brings a detection to
    the hook's call, over ``runs`` looping runs (barren at turns 4 and 8)."""
    ended: dict[str, float] = {}
    latencies: list[float] = []

    def hook(det: Any) -> None:
        latencies.append(time.perf_counter() - ended[det.span_id])

    provider, tracer = make(setup, on_detection=hook)
    for _ in range(runs):
        agent = tracer.start_span("invoke_agent loop", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "loop"})
        with trace.use_span(agent):
            for i in range(9):
                span = tracer.start_span("execute_tool search_docs", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_docs",
                    "gen_ai.tool.call.arguments": json.dumps({"q": f"refund policy variant {i}"}),
                    "gen_ai.tool.call.result": '{"results": [], "total": 0}'})
                if paced:
                    time.sleep(0.001)  # the tool call itself
                ended[format(span.get_span_context().span_id, "016x")] = time.perf_counter()
                span.end()
                if not paced:  # a busy application: more spans at once
                    for _ in range(20):
                        with tracer.start_as_current_span("work", attributes=PLAIN):
                            pass
        agent.end()
        provider.force_flush()
    provider.shutdown()
    return [x * 1e6 for x in latencies]


def engine_share(calls: int = 400) -> float:
    """Microseconds the engine alone spends on one of the benchmark's tool calls."""
    from otel_progress import Config, ProgressEngine, ToolCall

    engine = ProgressEngine(Config())
    if REAL:
        batch = [ToolCall(name=REAL[i % len(REAL)][1].get("gen_ai.tool.name", "t"),
                          arguments=REAL[i % len(REAL)][1].get("gen_ai.tool.call.arguments"),
                          result=REAL[i % len(REAL)][1].get("gen_ai.tool.call.result"), error=REAL[i % len(REAL)][2],
                          trace_id=f"{i // 50:032x}", span_id=f"{i:016x}", run_id="r",
                          start_ns=i * 1000, end_ns=i * 1000 + 500) for i in range(calls)]
    else:
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


def memory_child(setup: str, runs: int) -> dict[str, Any]:
    provider, tracer = make(setup)
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
    if setup != "bare":
        proc = provider._active_span_processor._span_processors[0]
        info.update(open_spans=proc.open_spans, traces=proc.tracked_traces, engine_runs=proc.active_runs)
    for agent in open_agents:
        agent.end()
    provider.shutdown()
    return info


def never_ended_child(setup: str, kind: str, count: int) -> dict[str, Any]:
    """Resident memory after ``count`` spans that start and never end, the application
    dropping each (a leak in the instrumented code, or a crash path): ``roots`` are plain
    local root spans; ``agents`` are ``invoke_agent`` spans, each with one ended tool call."""
    provider, tracer = make(setup)
    gc.collect()
    before = _rss_bytes()
    for i in range(count):
        if kind == "roots":
            tracer.start_span("GET /api/items", attributes=PLAIN)
            continue
        agent = tracer.start_span("invoke_agent a", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"agent-{i % 50}"})
        with trace.use_span(agent), tracer.start_as_current_span("execute_tool t", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.arguments": json.dumps({"id": i}),
                "gen_ai.tool.call.result": json.dumps({"status": "ok", "n": i})}):
            pass
    provider.force_flush()
    gc.collect()
    info: dict[str, Any] = {"count": count, "rss_delta_mb": (_rss_bytes() - before) / 2**20}
    if setup != "bare":
        proc = provider._active_span_processor._span_processors[0]
        tracker = proc._tracker
        info.update(open_spans=len(tracker.spans), roots=len(tracker.roots), traces=len(tracker.traces),
                    engine_runs=proc.active_runs, max_spans=tracker.max_spans)
    provider.shutdown()
    return info


def never_ended(roots: int, agents: int) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for kind, count in (("roots", roots), ("agents", agents)):
        out[kind] = {}
        for setup in SETUPS:
            proc = subprocess.run([sys.executable, __file__, "--never-ended-child", setup, kind, str(count)],
                                  capture_output=True, text=True, check=True, timeout=900)
            out[kind][setup] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def memory(runs: int) -> dict[str, dict[str, Any]]:
    out = {}
    for setup in SETUPS:
        proc = subprocess.run([sys.executable, __file__, "--memory-child", setup, "--runs", str(runs)],
                              capture_output=True, text=True, check=True, timeout=900)
        out[setup] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--spans", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--never-ended-roots", type=int, default=300_000)
    parser.add_argument("--never-ended-agents", type=int, default=200_000)
    parser.add_argument("--memory-child", choices=SETUPS)
    parser.add_argument("--never-ended-child", nargs=3, metavar=("SETUP", "KIND", "COUNT"))
    parser.add_argument("--only-never-ended", action="store_true", help="print only the never-ended figures")
    parser.add_argument("--only-memory", action="store_true", help="print only the memory figures")
    args = parser.parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, args.runs)))
        return 0
    if args.never_ended_child:
        setup, kind, count = args.never_ended_child
        print(json.dumps(never_ended_child(setup, kind, int(count))))
        return 0
    if args.only_never_ended:
        _print_never_ended(never_ended(args.never_ended_roots, args.never_ended_agents))
        return 0
    import opentelemetry.sdk.version as sdk_version

    print(f"otel-progress processor benchmark: opentelemetry-sdk {sdk_version.__version__},"
          f" Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.rounds} rounds (median)")
    if args.only_memory:
        _print_memory(args)
        return 0
    results = measure(args.rounds, args.spans)
    print(f"\ntool spans: {'the real runs (' + str(len(REAL)) + ' tool calls)' if REAL else 'synthetic'}")
    print("per span, us (ratio to bare); the target applies to the application thread, and to the"
          " process (total CPU) for tool spans")
    print(f"{'workload':<16} {'spans':>5} {'measure':<9} {'bare':>7} {'inline':>15} {'background':>15}"
          f" {'target':>6}")
    labels = {"app": "app CPU", "wall": "app wall", "cpu": "total CPU", "waits": "in waits"}
    for name, r in results.items():
        target = TARGETS[name]
        io = "I/O" in name
        for i, (key, label) in enumerate((k, v) for k, v in labels.items()
                                         if not (k == "wall" and io) and (k != "waits" or io)):
            bare = r["bare"][key]
            cells = []
            for setup in ("inline", "background"):
                ratio = r[setup][key] / bare
                goal = TOTAL_TARGETS.get(name) if key == "cpu" else (None if key == "waits" else target)
                mark = "" if goal is None else (" ok" if ratio <= goal else " !!")
                cells.append(f"{r[setup][key]:>7.2f} {ratio:>4.2f}x{mark:<3}")
            first = f"{name:<16} {int(r['bare']['spans']):>5}" if i == 0 else " " * 22
            goal_text = f"{target:.2f}" if key in ("app", "wall") else (
                f"{TOTAL_TARGETS[name]:.2f}" if key == "cpu" and name in TOTAL_TARGETS else "")
            print(f"{first} {label:<9} {bare:>7.2f} {cells[0]:>15} {cells[1]:>15} {goal_text:>6}")
    print("(!! over the target; total CPU: all threads, including the analysis worker and the"
          " batch exporter, through the final force_flush; in waits: the CPU the application"
          " thread spent inside its 1 ms sleeps, which the other rows leave out)")
    share = engine_share()
    print(f"\nengine alone (ProgressEngine.observe on the same tool call): {share:.1f} us per call")
    print("\nhook latency, from span.end() of the tool span to on_detection (us):")
    print(f"  {'application':<36} {'inline p50':>10} {'p95':>8} {'background p50':>15} {'p95':>8}")
    for paced, label in ((True, "waits ~1 ms per tool call (I/O)"), (False, "tight loop, 20 more spans per call")):
        inline = hook_latency("inline", paced)
        background = hook_latency("background", paced)
        print(f"  {label:<36} {_pct(inline, .5):>10.0f} {_pct(inline, .95):>8.0f}"
              f" {_pct(background, .5):>15.0f} {_pct(background, .95):>8.0f}")
    if not args.no_memory:
        _print_memory(args)
    return 0


def _print_memory(args: argparse.Namespace) -> None:
    mem = memory(args.runs)
    bare = mem["bare"]
    print(f"\nresident memory with {args.runs:,} agent runs in flight (open agent span + one tool call):")
    print(f"  bare SDK:        +{bare['rss_delta_mb']:.1f} MiB")
    for setup in ("inline", "background"):
        m = mem[setup]
        print(f"  {setup + ':':<16} +{m['rss_delta_mb']:.1f} MiB"
              f" (processor + engine: +{m['rss_delta_mb'] - bare['rss_delta_mb']:.1f} MiB;"
              f" tracked: {m['open_spans']:,} open spans, {m['traces']:,} traces,"
              f" {m['engine_runs']:,} engine runs - capped by max_spans and max_runs)")
    _print_never_ended(never_ended(args.never_ended_roots, args.never_ended_agents))


def _print_never_ended(figures: dict[str, dict[str, dict[str, Any]]]) -> None:
    labels = {"roots": "never-ended plain root spans", "agents": "never-ended agent spans (one tool call each)"}
    print("\nresident memory with spans that never end (dropped by the application unended):")
    for kind, by_setup in figures.items():
        bare = by_setup["bare"]
        print(f"  {bare['count']:,} {labels[kind]}: bare SDK +{bare['rss_delta_mb']:.1f} MiB")
        for setup in ("inline", "background"):
            m = by_setup[setup]
            held = m["rss_delta_mb"] - bare["rss_delta_mb"]
            print(f"    {setup + ':':<12} +{m['rss_delta_mb']:.1f} MiB (processor and engine: +{held:.1f} MiB;"
                  f" tables: {m['open_spans']:,} open spans, {m['roots']:,} roots, {m['traces']:,} traces,"
                  f" {m['engine_runs']:,} engine runs; max_spans {m['max_spans']:,})")


if __name__ == "__main__":
    raise SystemExit(main())
