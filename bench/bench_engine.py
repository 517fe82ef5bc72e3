"""Engine cost per tool call against its floor, and memory per tracked run.

Run: ``python -m bench.bench_engine [--mode real|synthetic|all] [--pairs 7]`` (prints its
figures beside their goals; no pass/fail: the machines are shared and noisy, so only
ratios measured side by side in one process are compared, never absolute times).

**The floor** of one call is what any engine must do with it: one BLAKE3 digest of its
arguments and result (encoded to UTF-8) and one orjson parse of each of them that is
JSON text (a text that does not open with ``{`` or ``[`` needs no parse; one that does is
tried). The goal is the engine at most 3x its floor on real calls (issue 16).

**Real mode** (the default when present): the tool calls of the real runs in
``../shared/realtraces/dev.jsonl.gz``, ``../shared/realtraces/added/*.jsonl.gz`` and
``../shared/realtraces/swebench/*.jsonl.gz`` (shell agent commands and outputs, tau-bench
requests, ReAct searches, OpenHands and Magentic-One calls, OpenHands on SWE-bench), read with the project's own readers
(:func:`otel_progress.otlp.files.spans_from_request`, then the replay of
:func:`otel_progress.scan.analyse.analyse_trace`, which builds each call with
:func:`otel_progress.conventions.spans.read_tool_call`). The replay's engine calls (observe with its
flush decision, flush at a model call, token counts, end of run, end of trace) are
recorded once and replayed into a fresh :class:`ProgressEngine` per round, run by run, so
a round times the engine alone, not the readers. Skipped, with a message, where
``../shared/realtraces`` is absent (the project does not ship it).

A last figure replays the same runs with nothing captured (tool names, times and outcomes
only) beside the same floor: the cost of the pipeline itself, which no shortcut in the
content path can remove.

**Synthetic mode**: 20,000 generated calls with arguments of about 200 bytes and results
of about 2 KB, as JSON strings, all signals on.

Each mode runs ``--pairs`` rounds (at least 7). A round feeds a fresh engine run by run
(synthetic: 200 calls at a time) and times the floor of each run's calls right after (or
before: the order alternates) its engine part, so both sides see the same machine load;
times are the thread's CPU time (``time.thread_time``), so the time other processes take
the CPU away is counted on neither side. It prints the median over the rounds of engine
time / floor time, with the goal beside it.

**Each real round runs in a fresh process** (``python -m bench.bench_engine
--real-round``, after a warm-up on synthetic calls): a round in a process that has already
replayed the same calls would find them warm wherever something outlives its engine (a
table of texts kept at module level, the hash a text object keeps once computed), which a
process seeing those calls for the first time does not; older versions of the engine
kept such tables, and in-process rounds flattered them (magentic_one: 9x in process, 14x
in fresh processes, on the engine of the h/engine branch). ``--in-process`` runs the rounds
in this process, after a warm-up round (faster; the current engine keeps no table beyond
its engine, and gives the same figures within noise). The per-source figures and the
pipeline-alone figure come from the same rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import random
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import blake3
import orjson

from otel_progress import NOT_CAPTURED, Config, ProgressEngine, ToolCall
from otel_progress.engine import EngineStats
from otel_progress.otlp.files import ReadProblem, iter_documents, open_input, spans_from_request
from otel_progress.scan.analyse import analyse_trace

S = 1_000_000_000
GOAL = 3.0  # engine / floor on real calls (issue 16)
REAL_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "realtraces"

#: One recorded engine call: (method name, positional arguments, keyword arguments).
Op = tuple[str, tuple[Any, ...], dict[str, Any]]


# -- real calls ---------------------------------------------------------------------------

def real_files(directory: Path | None = None) -> list[Path]:
    """The real trace files: ``dev.jsonl.gz``, ``added/*.jsonl.gz`` and
    ``swebench/*.jsonl.gz`` (not the ``*.steps.jsonl.gz`` plain-step copies); empty when
    the directory is absent. The same list as ``bench.quality.realruns.real_files``."""
    directory = REAL_DIR if directory is None else directory
    if not directory.is_dir():
        return []
    files = [*sorted(directory.glob("*.jsonl.gz")), *sorted((directory / "added").glob("*.jsonl.gz")),
             *sorted((directory / "swebench").glob("*.jsonl.gz"))]
    return [f for f in files if not f.name.endswith(".steps.jsonl.gz")]


def iter_traces(files: Sequence[Path]) -> Iterator[tuple[str, list[Any]]]:
    """``(source, spans)`` of each OTLP/JSON document of the files (one trace per line in
    the real files), read with the project's own readers."""
    for path in files:
        stream, _ = open_input(str(path))
        with stream:
            for item in iter_documents(stream, path.name):
                if isinstance(item, ReadProblem):
                    raise ValueError(f"{path}: {item}")
                _, doc = item
                spans = list(spans_from_request(doc, source=path.name))
                if spans:
                    yield path.name, spans


class _Recorder:
    """Stands in for the engine during :func:`analyse_trace`'s replay and records the
    engine calls it makes (what the replay does with their answers does not change the
    calls it makes next)."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.calls: list[ToolCall] = []
        self.config = Config()  # (what the run model reads of an engine besides its calls)
        self.stats = EngineStats()

    def observe(self, call: ToolCall, **kw: Any) -> list[Any]:
        self.ops.append(("observe", (call,), kw))
        self.calls.append(call)
        return []

    def flush(self, *args: Any, **kw: Any) -> list[Any]:
        self.ops.append(("flush", args, kw))
        return []

    def record_tokens(self, *args: Any, **kw: Any) -> None:
        self.ops.append(("record_tokens", args, kw))

    def compaction(self, *args: Any, **kw: Any) -> list[Any]:
        self.ops.append(("compaction", args, kw))
        return []

    def end_run(self, *args: Any, **kw: Any) -> None:
        self.ops.append(("end_run", args, kw))

    def end_trace(self, *args: Any, **kw: Any) -> list[Any]:
        self.ops.append(("end_trace", args, kw))
        return []

    def rename_run(self, *args: Any, **kw: Any) -> None:
        self.ops.append(("rename_run", args, kw))

    def run_state(self, *args: Any, **kw: Any) -> None:
        return None


def record_replay(spans: list[Any]) -> tuple[list[Op], list[ToolCall]]:
    """The engine calls that ``analyse_trace`` makes for one trace, and its tool calls."""
    recorder = _Recorder()
    analyse_trace(spans, recorder)  # type: ignore[arg-type]
    return recorder.ops, recorder.calls


def real_workload(files: Sequence[Path]) -> list[tuple[str, list[Op], list[ToolCall]]]:
    """Per trace: its source file, its recorded engine calls and its tool calls."""
    return [(source, *record_replay(spans)) for source, spans in iter_traces(files)]


def replay(engine: ProgressEngine, runs: Sequence[Sequence[Op]]) -> int:
    """Feed the recorded calls to ``engine``, run by run; the detections announced."""
    n = 0
    for ops in runs:
        for name, args, kw in ops:
            out = getattr(engine, name)(*args, **kw)
            if name == "observe" or name == "flush":
                n += len(out)
            elif name == "end_trace":
                n += sum(len(s.detections_list) for s in out)
    return n


# -- the floor ----------------------------------------------------------------------------

def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None or not value:  # (None, NOT_CAPTURED)
        return ""
    return json.dumps(value)


def floor_inputs(calls: Sequence[ToolCall]) -> list[tuple[str, str, bool, bool]]:
    """Per call: arguments and result as text, and whether each opens like JSON (the
    floor parses those: a text that does not need no parse)."""
    out = []
    for c in calls:
        a, r = _text(c.arguments), _text(c.result)
        out.append((a, r, a.lstrip()[:1] in ("{", "["), r.lstrip()[:1] in ("{", "[")))
    return out


def floor_pass(inputs: Sequence[tuple[str, str, bool, bool]]) -> None:
    """The floor of every call: one BLAKE3 digest of arguments + result, one orjson
    parse of each that is JSON text."""
    loads = orjson.loads
    error = orjson.JSONDecodeError
    for a, r, a_json, r_json in inputs:
        blake3.blake3(a.encode("utf-8", "surrogatepass") + r.encode("utf-8", "surrogatepass")).digest(8)
        if a_json:
            try:  # noqa: SIM105 - contextlib.suppress would add its own cost to the floor
                loads(a)
            except error:
                pass
        if r_json:
            try:  # noqa: SIM105
                loads(r)
            except error:
                pass


def paired_round(units: Sequence[tuple[Callable[[ProgressEngine], Any], Callable[[], Any]]]
                 ) -> list[tuple[float, float]]:
    """One round: a fresh engine, then for each unit (a run, or a slice of calls) its
    engine part and its floor part timed one right after the other, so that a change of
    the machine's load during the round weighs on both sides alike (the order of the two
    alternates from unit to unit). Returns each unit's engine and floor times."""
    engine = ProgressEngine(Config())
    clock = time.thread_time  # CPU time of this thread: the time the machine's other work takes is not counted
    out = []
    gc.collect()
    gc.disable()
    try:
        for i, (engine_part, floor_part) in enumerate(units):
            if i % 2:
                t0 = clock()
                floor_part()
                t1 = clock()
                engine_part(engine)
                t2 = clock()
                out.append((t2 - t1, t1 - t0))
            else:
                t0 = clock()
                engine_part(engine)
                t1 = clock()
                floor_part()
                t2 = clock()
                out.append((t1 - t0, t2 - t1))
    finally:
        gc.enable()
    return out


def _total(times: Sequence[tuple[float, float]]) -> tuple[float, float]:
    return sum(e for e, _ in times), sum(f for _, f in times)


def rounds(units: Sequence[tuple[Callable[[ProgressEngine], Any], Callable[[], Any]]],
           pairs: int) -> list[tuple[float, float]]:
    """``pairs`` rounds of :func:`paired_round` in this process, after one warm-up round
    (the synthetic calls: their texts are new every round)."""
    paired_round(units)
    return [_total(paired_round(units)) for _ in range(pairs)]


def report(label: str, times: Sequence[tuple[float, float]], n: int, goal: float | None) -> float:
    ratio = statistics.median(e / f for e, f in times)
    e_us = statistics.median(e for e, _ in times) / n * 1e6
    f_us = statistics.median(f for _, f in times) / n * 1e6
    target = f"[goal <= {goal:g}x]" if goal is not None else "[no goal: for comparison]"
    print(f"  {label:<38} engine/floor {ratio:5.1f}x  {target}   ({e_us:6.1f} µs vs {f_us:5.1f} µs a call,"
          f" medians of {len(times)} rounds)")
    return ratio


def real_units(traces: Sequence[tuple[str, list[Op], list[ToolCall]]], counted: list[int], bare: bool = False
               ) -> list[tuple[Callable[[ProgressEngine], Any], Callable[[], Any]]]:
    """One unit per run: replaying its engine calls (``bare``: with nothing captured),
    and the floor of its calls; the detections each replay announced go to ``counted``."""
    units = []
    for _, ops, trace_calls in traces:
        if bare:
            ops = [(name, (_without_content(args[0]),), kw) if name == "observe" else (name, args, kw)
                   for name, args, kw in ops]
        floor_in = floor_inputs(trace_calls)
        units.append((lambda engine, ops=ops: counted.append(replay(engine, [ops])),
                      lambda i=floor_in: floor_pass(i)))
    return units


def real_round() -> dict[str, Any]:
    """One round of the real calls as a fresh process runs it (``--real-round``): after a
    warm-up on synthetic calls (the interpreter and the code paths warm, no table holding
    a real text), each run's engine part and floor, then the same runs with no content.
    Returns the times per source, the bare times and the detections."""
    traces = real_workload(real_files())
    warm = make_calls(2000, seed=3)
    _observe_all(ProgressEngine(Config()), warm)
    floor_pass(floor_inputs(warm))
    counted: list[int] = []
    return _round_result(traces, real_units(traces, counted), counted)


def _round_result(traces: Sequence[tuple[str, list[Op], list[ToolCall]]],
                  units: Sequence[tuple[Callable[[ProgressEngine], Any], Callable[[], Any]]],
                  counted: list[int]) -> dict[str, Any]:
    """One round of ``units`` (the runs of ``traces``), then of the same runs with no
    content: the engine and floor times per source, the bare times and the detections."""
    before = len(counted)
    times = paired_round(units)
    sources: dict[str, list[float]] = {}
    for (source, _, _), (e, f) in zip(traces, times, strict=True):
        acc = sources.setdefault(source, [0.0, 0.0])
        acc[0] += e
        acc[1] += f
    bare = _total(paired_round(real_units(traces, [], bare=True)))
    return {"sources": sources, "bare": bare, "detections": sum(counted[before:])}


def bench_real(pairs: int, per_source: bool, in_process: bool = False) -> float | None:
    files = real_files()
    if not files:
        print(f"real calls: skipped: {REAL_DIR} is absent (the real runs are not part of the project)")
        return None
    traces = real_workload(files)
    runs = [ops for _, ops, _ in traces]
    calls = [c for _, _, trace_calls in traces for c in trace_calls]
    inputs = floor_inputs(calls)
    failed = sum(1 for c in calls if c.error)
    arg_b = statistics.mean(len(a) for a, _, _, _ in inputs)
    res_b = statistics.mean(len(r) for _, r, _, _ in inputs)
    print(f"real calls: {len(calls)} calls in {len(runs)} runs from {', '.join(f.name for f in files)};"
          f" {failed / len(calls):.0%} failed; arguments ~{arg_b:.0f} B, results ~{res_b:.0f} B on average"
          f" ({'rounds in this process' if in_process else 'each round in a fresh process'})")
    sizes = {source: sum(len(cs) for s, _, cs in traces if s == source) for source, _, _ in traces}
    if in_process:
        counted: list[int] = []
        units = real_units(traces, counted)
        paired_round(units)
        results = [_round_result(traces, units, counted) for _ in range(pairs)]
    else:
        results = [_child_round() for _ in range(pairs)]
    overall = [(sum(e for e, _ in r["sources"].values()), sum(f for _, f in r["sources"].values())) for r in results]
    ratio = report("all real calls", overall, len(calls), GOAL)
    totals = {r["detections"] for r in results}
    print(f"  detections per round: {sorted(totals)[0]} (the same every round: {len(totals) == 1})")
    if per_source:
        for source, n in sizes.items():
            report(source, [tuple(r["sources"][source]) for r in results], n, None)
    # The same runs with nothing captured (names, times and outcomes only): what the
    # pipeline itself costs a call, beside the same floor. No shortcut in the content
    # path can take the ratio below this figure.
    report("same runs, no content (pipeline alone)", [tuple(r["bare"]) for r in results], len(calls), None)
    return ratio


def _child_round() -> dict[str, Any]:
    """:func:`real_round` in a new interpreter (this file's own, on this checkout)."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "bench.bench_engine", "--real-round"], cwd=root,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ValueError(f"a round failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def _without_content(call: ToolCall) -> ToolCall:
    return dataclasses.replace(call, arguments=NOT_CAPTURED, result=NOT_CAPTURED, error_message=None)


# -- synthetic calls ----------------------------------------------------------------------

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


def _observe_all(engine: ProgressEngine, calls: Sequence[ToolCall]) -> None:
    for c in calls:
        engine.observe(c, flush=True)


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


def bench_synthetic(pairs: int, memory: bool) -> float:
    calls = make_calls(20_000)
    inputs = floor_inputs(calls)
    arg_b = statistics.mean(len(c.arguments) for c in calls)
    res_b = statistics.mean(len(c.result) for c in calls)
    print(f"synthetic calls: {len(calls)}, arguments ~{arg_b:.0f} B, results ~{res_b:.0f} B, all signals on, window 10")

    chunk = 200
    units = [(lambda engine, part=calls[i:i + chunk]: _observe_all(engine, part),
              lambda part=inputs[i:i + chunk]: floor_pass(part)) for i in range(0, len(calls), chunk)]
    ratio = report("synthetic calls", rounds(units, pairs), len(calls), GOAL)
    if memory:
        for calls_per_run in (10, 50):
            kb = memory_per_run(2000, calls_per_run) / 1024
            print(f"  memory per tracked run after {calls_per_run} calls: {kb:.2f} KB  [goal < 4 KB]")
    return ratio


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_engine", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("real", "synthetic", "all"), default="all")
    parser.add_argument("--pairs", type=int, default=7, help="rounds per figure (>= 7)")
    parser.add_argument("--per-source", action="store_true", help="also print the ratio of each real file")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory-per-run figures")
    parser.add_argument("--in-process", action="store_true",
                        help="real calls: run the rounds in this process (faster; see the module docstring)")
    parser.add_argument("--real-round", action="store_true", help=argparse.SUPPRESS)  # (one round, as JSON)
    args = parser.parse_args(argv)
    if args.real_round:
        print(json.dumps(real_round()))
        return 0
    if args.pairs < 7:
        parser.error("--pairs must be at least 7 (the figures are medians of at least 7 pairs)")
    if args.mode in ("real", "all"):
        try:
            bench_real(args.pairs, args.per_source, args.in_process)
        except (OSError, ValueError) as exc:
            print(f"real calls: cannot read the real runs: {exc}", file=sys.stderr)
            return 1
    if args.mode in ("synthetic", "all"):
        bench_synthetic(args.pairs, not args.no_memory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
