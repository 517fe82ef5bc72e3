"""Engine cost per tool call and memory per tracked run.

Run: ``python bench/bench_engine.py`` (prints its figures; no pass/fail: the targets are
under 15 µs per call and under 4 KB per run at window 10, compared by reading).

Calls carry realistic content: arguments of about 200 bytes and results of about 2 KB,
as JSON strings (the form OpenTelemetry GenAI spans carry), with all signals enabled.
The per-call figure is measured side by side with the cost of only computing one BLAKE3
digest of the same bytes, to give a machine-independent ratio.
"""

from __future__ import annotations

import gc
import json
import random
import statistics
import time
import tracemalloc

import blake3

from otel_progress import Config, ProgressEngine, ToolCall

S = 1_000_000_000


def make_calls(n: int, seed: int = 1) -> list[ToolCall]:
    rnd = random.Random(seed)
    tools = ["search_docs", "read_file", "run_tests", "edit_file", "get_build_status", "list_files"]
    calls = []
    for i in range(n):
        tool = rnd.choice(tools)
        args = json.dumps({"path": f"src/pkg/module_{rnd.randrange(50)}.py", "query": "x" * 120,
                           "options": {"recursive": True, "limit": 50, "offset": rnd.randrange(10)}})
        rows = [{"id": rnd.randrange(10**6), "title": f"row {j}", "body": "lorem ipsum " * 5} for j in range(20)]
        result = json.dumps({"status": "ok", "items": rows})
        calls.append(ToolCall(name=tool, arguments=args, result=result, start_ns=i * S, end_ns=i * S + S // 2,
                              trace_id="bench", span_id=f"{i:016x}", run_id="run"))
    return calls


def per_call_us(engine: ProgressEngine, calls: list[ToolCall]) -> float:
    gc.disable()
    t0 = time.perf_counter()
    for c in calls:
        engine.observe(c, flush=True)
    elapsed = time.perf_counter() - t0
    gc.enable()
    return elapsed / len(calls) * 1e6


def digest_us(calls: list[ToolCall]) -> float:
    t0 = time.perf_counter()
    for c in calls:
        blake3.blake3((c.arguments + c.result).encode()).digest(8)
    return (time.perf_counter() - t0) / len(calls) * 1e6


def memory_per_run(runs: int, calls_per_run: int) -> float:
    engine = ProgressEngine(Config(max_runs=runs + 1))
    template = make_calls(calls_per_run, seed=2)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for r in range(runs):
        for c in template:
            engine.observe(ToolCall(name=c.name, arguments=c.arguments, result=c.result, start_ns=c.start_ns,
                                    end_ns=c.end_ns, trace_id=f"t{r}", span_id=c.span_id, run_id="run"), flush=True)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / runs


def main() -> None:
    calls = make_calls(20_000)
    arg_bytes = statistics.mean(len(c.arguments) for c in calls)
    res_bytes = statistics.mean(len(c.result) for c in calls)
    print(f"calls: {len(calls)}, arguments ~{arg_bytes:.0f} B, results ~{res_bytes:.0f} B, all signals on, window 10")
    rounds = []
    for _ in range(5):
        engine = ProgressEngine(Config())
        rounds.append((per_call_us(engine, calls), digest_us(calls)))
    best = min(r[0] for r in rounds)
    base = min(r[1] for r in rounds)
    print(f"engine cost per tool call: {best:.2f} µs (best of 5; median {statistics.median(r[0] for r in rounds):.2f})"
          f"  [target < 15 µs]")
    print(f"one BLAKE3 digest of the same bytes: {base:.2f} µs  -> engine/digest ratio {best / base:.1f}x")
    for calls_per_run in (10, 50):
        kb = memory_per_run(2000, calls_per_run) / 1024
        print(f"memory per tracked run after {calls_per_run} calls: {kb:.2f} KB  [target < 4 KB]")


if __name__ == "__main__":
    main()
