"""Engine cost per tool call against its floor, and memory per tracked run.

Run: ``python -m bench.bench_engine [--mode real|synthetic|all] [--pairs 7] [--per-source]
[--before TREE] [--stages] [--no-quality]`` (prints its figures beside their goals; no
pass/fail: the machines are shared and noisy, so only ratios measured side by side in one
process are compared, never absolute times).

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

**The peers** (issue 26, :mod:`bench.engine_peers`): in the same rounds, beside each
trace's engine part and floor, the port of Pydantic AI Harness's ``LoopDetection``
(:mod:`bench.quality.baselines.pydantic_ai`) and a plain fingerprint guard run over the same
calls (a fresh one per run), timed the same way (the order of the four parts rotates from
trace to trace). A table prints, per source and over all real calls, the µs per call of
each and the goals: engine / Pydantic below 1x, engine / floor at most 3x. ``--before
TREE`` also runs rounds on the engine of another checkout (alternated with this one's) and
prints a before/after table; ``--stages`` prints how many calls reach each stage of the
engine's content path (where the engine counts them); the detection quality of the engine,
the port and the guard on the labelled real runs follows (``--no-quality`` skips it).

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

import otel_progress
from bench.engine_peers import (
    before_after_table,
    count_stages,
    fingerprint_pass,
    peer_inputs,
    pydantic_pass,
    quality_lines,
    stage_lines,
    target_table,
)
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


def _label(path: Path) -> str:
    """A real file's source label: its path under the real-traces directory
    (``dev.jsonl.gz``, ``added/magentic_one.jsonl.gz``, ``swebench/openhands_swebv.jsonl.gz``)."""
    try:
        return path.resolve().relative_to(REAL_DIR.resolve()).as_posix()
    except ValueError:
        return path.name


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
    """Per trace: its source file (:func:`_label`), its recorded engine calls and its tool calls."""
    labels = {f.name: _label(f) for f in files}
    return [(labels[source], *record_replay(spans)) for source, spans in iter_traces(files)]


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


#: One unit of a round: its engine part (given the round's engine), then the parts timed
#: beside it (the floor first; in real mode the Pydantic port and the fingerprint guard).
Unit = tuple[Callable[..., Any], ...]


def paired_round(units: Sequence[Unit]) -> list[tuple[float, ...]]:
    """One round: a fresh engine, then for each unit (a run, or a slice of calls) its
    engine part and the parts beside it timed one right after the other, so that a change
    of the machine's load during the round weighs on every side alike (the order rotates
    from unit to unit: with two parts, it alternates). Returns each unit's times, in the
    unit's order (engine, floor, ...)."""
    engine = ProgressEngine(Config())
    clock = time.thread_time  # CPU time of this thread: the time the machine's other work takes is not counted
    out = []
    gc.collect()
    gc.disable()
    try:
        for i, parts in enumerate(units):
            n = len(parts)
            times = [0.0] * n
            for k in range(n):
                j = (i + k) % n
                t0 = clock()
                if j:
                    parts[j]()
                else:
                    parts[0](engine)
                times[j] = clock() - t0
            out.append(tuple(times))
    finally:
        gc.enable()
    return out


def _total(times: Sequence[Sequence[float]]) -> tuple[float, ...]:
    return tuple(sum(column) for column in zip(*times, strict=True))


def rounds(units: Sequence[Unit], pairs: int) -> list[tuple[float, ...]]:
    """``pairs`` rounds of :func:`paired_round` in this process, after one warm-up round
    (the synthetic calls: their texts are new every round)."""
    paired_round(units)
    return [_total(paired_round(units)) for _ in range(pairs)]


def report(label: str, times: Sequence[Sequence[float]], n: int, goal: float | None) -> float:
    ratio = statistics.median(t[0] / t[1] for t in times)
    e_us = statistics.median(t[0] for t in times) / n * 1e6
    f_us = statistics.median(t[1] for t in times) / n * 1e6
    target = f"[goal <= {goal:g}x]" if goal is not None else "[no goal: for comparison]"
    print(f"  {label:<38} engine/floor {ratio:5.1f}x  {target}   ({e_us:6.1f} µs vs {f_us:5.1f} µs a call,"
          f" medians of {len(times)} rounds)")
    return ratio


def real_units(traces: Sequence[tuple[str, list[Op], list[ToolCall]]], counted: list[int], bare: bool = False,
               peers: bool = False) -> list[Unit]:
    """One unit per trace: replaying its engine calls (``bare``: with nothing captured),
    and the floor of its calls, then (``peers``) the Pydantic port and the fingerprint
    guard over the same calls; the detections each replay announced go to ``counted``."""
    units: list[Unit] = []
    for _, ops, trace_calls in traces:
        if bare:
            ops = [(name, (_without_content(args[0]),), kw) if name == "observe" else (name, args, kw)
                   for name, args, kw in ops]
        floor_in = floor_inputs(trace_calls)
        unit: Unit = (lambda engine, ops=ops: counted.append(replay(engine, [ops])),
                      lambda i=floor_in: floor_pass(i))
        if peers:
            runs = peer_inputs(trace_calls)
            unit += (lambda r=runs: pydantic_pass(r), lambda r=runs: fingerprint_pass(r))
        units.append(unit)
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
    return _round_result(traces, real_units(traces, counted, peers=True), counted)


def _round_result(traces: Sequence[tuple[str, list[Op], list[ToolCall]]], units: Sequence[Unit],
                  counted: list[int]) -> dict[str, Any]:
    """One round of ``units`` (the runs of ``traces``), then of the same runs with no
    content: the times per source (engine, floor, then the peers when the units have
    them), the bare times, the detections and the engine's checkout."""
    before = len(counted)
    times = paired_round(units)
    sources: dict[str, list[float]] = {}
    for (source, _, _), unit_times in zip(traces, times, strict=True):
        acc = sources.setdefault(source, [0.0] * len(unit_times))
        for k, t in enumerate(unit_times):
            acc[k] += t
    bare = _total(paired_round(real_units(traces, [], bare=True)))
    return {"sources": sources, "bare": bare, "detections": sum(counted[before:]),
            "engine": str(Path(otel_progress.__file__).resolve().parent)}


def bench_real(pairs: int, per_source: bool, in_process: bool = False, before: Path | None = None,
               stages: bool = False, quality: bool = True) -> float | None:
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
    print(f"real calls: {len(calls)} calls in {len(runs)} traces from {', '.join(_label(f) for f in files)};"
          f" {failed / len(calls):.0%} failed; arguments ~{arg_b:.0f} B, results ~{res_b:.0f} B on average"
          f" ({'rounds in this process' if in_process else 'each round in a fresh process'})")
    sizes = {source: sum(len(cs) for s, _, cs in traces if s == source) for source, _, _ in traces}
    older: list[dict[str, Any]] = []
    if in_process:
        counted: list[int] = []
        units = real_units(traces, counted, peers=True)
        paired_round(units)
        results = [_round_result(traces, units, counted) for _ in range(pairs)]
    else:
        results = []
        for _ in range(pairs):  # with --before, its rounds alternate with this checkout's
            results.append(_child_round())
            if before is not None:
                older.append(_child_round(before))
    ratio = report("all real calls", [_overall(r) for r in results], len(calls), GOAL)
    totals = {r["detections"] for r in results}
    print(f"  detections per round: {sorted(totals)[0]} (the same every round: {len(totals) == 1})")
    if per_source:
        for source, n in sizes.items():
            report(source, [tuple(r["sources"][source]) for r in results], n, None)
    # The same runs with nothing captured (names, times and outcomes only): what the
    # pipeline itself costs a call, beside the same floor. No shortcut in the content
    # path can take the ratio below this figure.
    report("same runs, no content (pipeline alone)", [tuple(r["bare"]) for r in results], len(calls), None)
    print(f"\nthe engine beside its peers on the same calls (issue 26; µs per call, medians of {len(results)}"
          " rounds; ratios: medians of the per-round ratios):")
    print("\n".join(target_table(_rows(results, sizes, len(calls)))))
    if older:
        print(f"\nbefore / after ({len(older)} rounds each, alternated; detections per round: before"
              f" {sorted({r['detections'] for r in older})}, after {sorted(totals)}):")
        print("\n".join(before_after_table(_rows(older, sizes, len(calls)), _rows(results, sizes, len(calls)),
                                          f"{before} ({older[0]['engine']})")))
    if stages:
        print_stages(traces, len(calls))
    if quality:
        print("\ndetection quality on the labelled real runs (the same files):")
        print("\n".join(quality_lines(files)))
    return ratio


def _overall(result: dict[str, Any]) -> tuple[float, ...]:
    return _total(list(result["sources"].values()))


def _rows(results: Sequence[dict[str, Any]], sizes: dict[str, int], n: int) -> list[tuple[str, int, list[Any]]]:
    """The target table's rows: each source, then all real calls."""
    rows: list[tuple[str, int, list[Any]]] = [(source, k, [r["sources"][source] for r in results])
                                              for source, k in sizes.items()]
    return [*rows, ("all real calls", n, [_overall(r) for r in results])]


def print_stages(traces: Sequence[tuple[str, list[Op], list[ToolCall]]], calls: int) -> None:
    """``--stages``: replay every real run into one fresh engine, in this process, and
    print how many calls reached each stage of the engine's content path
    (:func:`bench.engine_peers.count_stages`)."""
    runs = [ops for _, ops, _ in traces]
    counts = count_stages(lambda: replay(ProgressEngine(Config()), runs))
    print(f"\nstages of the content path, over the {calls} real calls (one replay in this process):")
    print("\n".join(stage_lines(counts, calls)))


def _child_round(tree: Path | None = None) -> dict[str, Any]:
    """:func:`real_round` in a new interpreter: this file's own, on this checkout's engine,
    or (``tree``) on the engine of another checkout (its ``otel_progress`` imported
    first, this checkout's ``bench`` after)."""
    root = Path(__file__).resolve().parents[1]
    if tree is None:
        cmd = [sys.executable, "-m", "bench.bench_engine", "--real-round"]
    else:
        cmd = [sys.executable, "-c", _OTHER_ENGINE, str(tree.resolve()), str(root)]
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ValueError(f"a round failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


#: A real round on another checkout's engine: its ``otel_progress`` first on the path,
#: then this checkout's ``bench`` ahead of that checkout's.
_OTHER_ENGINE = (
    "import sys; sys.path.insert(0, sys.argv[1]); import otel_progress; sys.path.insert(0, sys.argv[2]);"
    " [sys.modules.pop(m) for m in list(sys.modules) if m == 'bench' or m.startswith('bench.')];"
    " from bench.bench_engine import main; sys.exit(main(['--real-round']))")


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
    parser.add_argument("--before", metavar="TREE", type=Path,
                        help="real calls: also time the engine of this checkout (e.g. a git worktree of main),"
                             " rounds alternated, and print a before/after table")
    parser.add_argument("--stages", action="store_true",
                        help="real calls: print how many calls reach each stage of the engine's content path")
    parser.add_argument("--no-quality", action="store_true",
                        help="real calls: skip the detection-quality comparison on the labelled runs")
    parser.add_argument("--real-round", action="store_true", help=argparse.SUPPRESS)  # (one round, as JSON)
    args = parser.parse_args(argv)
    if args.real_round:
        print(json.dumps(real_round()))
        return 0
    if args.before is not None and not (args.before / "otel_progress" / "engine").is_dir():
        parser.error(f"--before {args.before}: not a checkout of otel-progress (no otel_progress/engine there)")
    if args.before is not None and args.in_process:
        parser.error("--before runs each round in a fresh process: it cannot be used with --in-process")
    if args.pairs < 7:
        parser.error("--pairs must be at least 7 (the figures are medians of at least 7 pairs)")
    if args.mode in ("real", "all"):
        try:
            bench_real(args.pairs, args.per_source, args.in_process, args.before, args.stages,
                       not args.no_quality)
        except (OSError, ValueError) as exc:
            print(f"real calls: cannot read the real runs: {exc}", file=sys.stderr)
            return 1
    if args.mode in ("synthetic", "all"):
        bench_synthetic(args.pairs, not args.no_memory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
