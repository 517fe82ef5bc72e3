"""``otel-progress scan``: its cost beside a JSON parse on real agent traces, then resident
memory and throughput over a large input.

Run: ``python bench/bench_scan.py [--copies 1] [--rounds 3] [--before 0cc1b64] [--size-mb 200]
[--no-large]`` (prints its figures beside their goals; no pass/fail).

First, on agent traffic: the real runs of ``../shared/realtraces`` (``dev``, ``added/`` and
``swebench/``; the synthetic scoreboard corpus where they are absent), ``--copies`` times
over under new trace ids, one export request per line, written to a temporary file; and a
web service's traces (40,000 plain spans: no agent, model or tool span, eight HTTP
attributes each). Two trees are measured, alternated in every round: this one and the
package of commit ``--before`` (extracted with ``git archive``; both byte-compiled first,
as an installed package is). For each tree, in fresh processes: ``otel-progress scan
--no-progress`` of the agent file (CPU of the whole process, and its peak resident
memory), the command on a one-line file (start-up), and ``bench/scan_stages.py`` on both
files (read and parse, records, assembly, the scan with a null engine, the whole scan:
where the time goes). Beside them, in this process, ``json.loads`` and ``orjson.loads`` of
every line (the floor of any reader). The ratios are medians of per-round ratios, printed
per tree beside their goals (issue 26, item 3: scan <= 3x ``json.loads`` and <= 2x
``orjson.loads``; plain spans no dearer than parsing them).

Then it generates (once, cached under ``~/.cache/otel-progress/``) a line-delimited OTLP/JSON
file as the Collector's file exporter writes it: batches of spans in the order they
ended, several agent runs in flight at once, so a run's spans are spread over several
lines and lines hold spans of several runs; tool results of about 1 KB. Then it runs
``otel-progress scan --no-progress`` in a fresh process on

* the file as generated, without and with ``--html`` (the report keeps every tool
  call's timeline data),
* the same file with a corrupt first line (the case that used to buffer the whole file),
* 10% of the size of non-JSON garbage (the error lines printed are counted),

and prints each run's peak resident memory (from ``wait4``), the ratio to the input size,
the ratio to a bare interpreter that imported the command, and the throughput beside a
plain ``json.loads`` of every line in the same process (the floor for any reader).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

S = 1_000_000_000
T0 = 1_764_000_000_000_000_000
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "otel-progress"


def _attr(key: str, value: object) -> dict[str, object]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


def _trace_spans(n: int, rnd: random.Random) -> list[dict[str, object]]:
    """One agent run: an invoke_agent span with chat and tool spans, in end order."""
    trace_id = f"{rnd.getrandbits(128):032x}"
    agent_id = f"{rnd.getrandbits(64):016x}"
    t = T0 + n * 7 * S
    spans: list[dict[str, object]] = []
    loop = n % 3 == 0  # a third of the runs repeat one search

    def span(name: str, start: int, end: int, attributes: list[dict[str, object]], parent: str) -> None:
        spans.append({"traceId": trace_id, "spanId": f"{rnd.getrandbits(64):016x}", "parentSpanId": parent,
                      "name": name, "kind": 1, "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
                      "attributes": attributes, "status": {}})

    start = t
    for i in range(rnd.randrange(10, 30)):
        span("chat gpt-4o", t, t + S, [_attr("gen_ai.operation.name", "chat"),
                                       _attr("gen_ai.usage.input_tokens", 1500 + i * 10),
                                       _attr("gen_ai.usage.output_tokens", 120)], agent_id)
        t += S
        query = "refund policy" if loop else f"topic {n} part {i}"
        body = [{"id": f"doc-{n}-{i}-{j}", "title": f"result {j}", "text": "lorem ipsum dolor " * 3}
                for j in range(0 if loop else 8)]
        span("execute_tool search_docs", t, t + S // 2,
             [_attr("gen_ai.operation.name", "execute_tool"), _attr("gen_ai.tool.name", "search_docs"),
              _attr("gen_ai.tool.call.arguments", json.dumps({"q": query})),
              _attr("gen_ai.tool.call.result", json.dumps({"results": body}))], agent_id)
        t += S
    spans.append({"traceId": trace_id, "spanId": agent_id, "name": "invoke_agent research-agent", "kind": 1,
                  "startTimeUnixNano": str(start), "endTimeUnixNano": str(t + S),
                  "attributes": [_attr("gen_ai.operation.name", "invoke_agent"),
                                 _attr("gen_ai.agent.name", "research-agent")], "status": {}})
    return spans


def generate(path: Path, size_mb: int) -> None:
    rnd = random.Random(7)
    limit = size_mb * 1_000_000
    written = 0
    n = 0
    in_flight: list[list[dict[str, object]]] = []
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        while written < limit:
            while len(in_flight) < 8:
                in_flight.append(_trace_spans(n, rnd))
                n += 1
            batch: list[dict[str, object]] = []
            while len(batch) < 96 and in_flight:  # spans end interleaved across the runs in flight
                run = in_flight[rnd.randrange(len(in_flight))]
                batch.append(run.pop(0))
                if not run:
                    in_flight.remove(run)
            line = json.dumps({"resourceSpans": [{"resource": {"attributes": [_attr("service.name", "bench")]},
                                                  "scopeSpans": [{"scope": {"name": "bench"}, "spans": batch}]}]},
                              separators=(",", ":")) + "\n"
            fh.write(line)
            written += len(line)
        for run in in_flight:  # finish the runs still in flight
            line = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": run}]}]}, separators=(",", ":")) + "\n"
            fh.write(line)
    tmp.replace(path)


def run(cmd: list[str], stderr_lines: bool = False) -> tuple[float, float, int, int]:
    """Run ``cmd``; returns (seconds, peak RSS in MB, exit status, lines on stderr)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lines = 0
    assert proc.stderr is not None
    for _ in proc.stderr:
        lines += 1
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, proc.returncode, lines


def json_floor(path: Path) -> float:
    """Seconds for a bare ``json.loads`` of every line (the floor for any reader)."""
    t0 = time.perf_counter()
    with open(path, "rb") as fh:
        for line in fh:
            json.loads(line)
    return time.perf_counter() - t0


def write_real(path: Path, copies: int) -> tuple[int, int]:
    """The real runs (or the corpus), ``copies`` times under new trace ids, one request per
    line; returns (lines, tool calls)."""
    from bench.realtraffic import trace_documents

    docs = [json.dumps(d, separators=(",", ":")) for d in trace_documents(swebench=True)]
    ids = [json.loads(d)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] for d in docs]
    lines = tools = 0
    with open(path, "w", encoding="utf-8") as fh:
        for copy in range(copies):
            for text, trace_id in zip(docs, ids, strict=True):
                new = f"{copy:04x}{trace_id[4:]}"
                fh.write(text.replace(trace_id, new) + "\n")
                lines += 1
                if copy == 0:
                    tools += text.count('"execute_tool"')
    return lines, tools * copies


def floors(path: Path) -> tuple[float, float]:
    """CPU seconds of ``json.loads`` and of ``orjson.loads`` of every line, in this process."""
    import orjson

    out = []
    for loads in (json.loads, orjson.loads):
        t0 = time.process_time()
        with open(path, "rb") as fh:
            for line in fh:
                loads(line)
        out.append(time.process_time() - t0)
    return out[0], out[1]


def child_cpu(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    """(CPU seconds, exit status) of a command in a fresh process (``wait4``)."""
    cpu, status, _ = child_usage(cmd, env)
    return cpu, status


def child_usage(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, float]:
    """(CPU seconds, exit status, peak resident MB) of a command in a fresh process."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    return usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024


def write_plain(path: Path, spans: int) -> int:
    """A web service's traces (no agent, model or tool span; eight HTTP attributes a span,
    as OpenTelemetry's HTTP instrumentations write them), 64 spans a line, one trace a line."""
    rnd = random.Random(11)
    written = 0
    with open(path, "w", encoding="utf-8") as fh:
        while written < spans:
            trace_id = f"{rnd.getrandbits(128):032x}"
            root = f"{rnd.getrandbits(64):016x}"
            batch = []
            for i in range(64):
                t = T0 + (written + i) * 1000
                batch.append({"traceId": trace_id, "spanId": root if i == 63 else f"{rnd.getrandbits(64):016x}",
                              "parentSpanId": "" if i == 63 else root, "name": "GET /api/v1/items", "kind": 3,
                              "startTimeUnixNano": str(t), "endTimeUnixNano": str(t + 500),
                              "attributes": [_attr("http.request.method", "GET"),
                                             _attr("url.full", f"https://svc.invalid/items/{i}"),
                                             _attr("http.response.status_code", 200),
                                             _attr("server.address", "svc.invalid"), _attr("server.port", 443),
                                             _attr("network.protocol.version", "1.1"),
                                             _attr("user_agent.original", "bench/1.0"),
                                             _attr("http.route", "/api/v1/items")],
                              "status": {}})
            fh.write(json.dumps({"resourceSpans": [{"resource": {"attributes": [_attr("service.name", "web")]},
                                                    "scopeSpans": [{"scope": {"name": "http"}, "spans": batch}]}]},
                                separators=(",", ":")) + "\n")
            written += len(batch)
    return written


def before_tree(rev: str, into: Path) -> Path:
    """The package of commit ``rev`` of this repository, extracted under ``into``."""
    repo = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "-C", str(repo), "archive", rev, "otel_progress"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def measure_tree(tree: Path, agent: Path, plain: Path, tiny: Path) -> dict[str, float]:
    """One tree's figures in fresh processes: the whole scan command (CPU), its start-up
    (the command on a one-line file), and the stages in one process (bench/scan_stages.py)."""
    scan = [sys.executable, "-m", "otel_progress.cli", "scan", "--no-progress"]
    stages = [sys.executable, str(Path(__file__).with_name("scan_stages.py"))]
    out: dict[str, float] = {}
    out["scan"], out["exit"], out["rss"] = child_usage([*scan, str(agent)], _env(tree))
    out["start-up"], _ = child_cpu([*scan, str(tiny)], _env(tree))
    for name, path in (("", agent), ("plain ", plain)):
        text = subprocess.run([*stages, str(path)], env=_env(tree), check=True, capture_output=True,
                              text=True).stdout
        out.update({name + k: v for k, v in json.loads(text).items()})
    return out


#: (figure, goal or "", how it is computed from one round's figures of one tree: f, and the floors: j)
_FIGURES = (
    ("scan / json.loads", "<= 3.00x", lambda f, j: f["scan"] / j["json"]),
    ("scan / orjson.loads", "<= 2.00x", lambda f, j: f["scan"] / j["orjson"]),
    ("scan, null engine / json.loads", "", lambda f, j: (f["null"] + f["start-up"]) / j["json"]),
    ("scan, null engine / orjson.loads", "", lambda f, j: (f["null"] + f["start-up"]) / j["orjson"]),
    ("reading (to records) / orjson.loads", "", lambda f, j: f["records"] / j["orjson"]),
    ("plain spans: scan / json.loads", "<= 1.00x", lambda f, j: f["plain full"] / j["plain json"]),
    ("plain spans: scan / orjson.loads", "", lambda f, j: f["plain full"] / j["plain orjson"]),
)
#: The time split: stage, and its seconds from one tree's figures
_SPLIT = (
    ("start-up (the command on one line)", lambda f: f["start-up"]),
    ("read + parse (orjson)", lambda f: f["parse"]),
    ("records (spans_from_request)", lambda f: f["records"] - f["parse"]),
    ("assembly (complete traces)", lambda f: f["assembly"] - f["records"]),
    ("replay (runs, conventions)", lambda f: f["null"] - f["assembly"]),
    ("the engine", lambda f: f["full"] - f["null"]),
)


def bench_real(copies: int, rounds: int, before: str | None) -> None:
    import tempfile

    from bench.realtraffic import traffic_source

    with tempfile.TemporaryDirectory(prefix="bench-scan-") as tmp:
        agent, plain, tiny = Path(tmp) / "traces.jsonl", Path(tmp) / "plain.jsonl", Path(tmp) / "tiny.jsonl"
        lines, tools = write_real(agent, copies)
        plain_spans = write_plain(plain, 40_000)
        with open(agent, "rb") as src:
            tiny.write_bytes(src.readline())
        trees = {"after": Path(__file__).resolve().parents[1]}
        if before:
            trees = {"before": before_tree(before, Path(tempfile.mkdtemp(dir=tmp))), **trees}
        for tree in trees.values():  # bytecode, as an installed package has it (both trees alike)
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "otel_progress")], check=True,
                           stdout=subprocess.DEVNULL)
        size = agent.stat().st_size / 1e6
        print(f"scan vs a JSON parse: {traffic_source(swebench=True)}")
        print(f"  {copies} copies: {size:.0f} MB, {lines:,} lines (one run each), {tools:,} tool calls;"
              f" plain spans: {plain_spans:,} ({plain.stat().st_size / 1e6:.0f} MB); {rounds} rounds,"
              f" trees alternated ({', '.join(trees)}{' = ' + before if before else ''}); CPU seconds")
        rows: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        base: list[dict[str, float]] = []
        for r in range(rounds):
            j, o = floors(agent)
            pj, po = floors(plain)
            base.append({"json": j, "orjson": o, "plain json": pj, "plain orjson": po})
            for name in (list(trees) if r % 2 == 0 else list(reversed(trees))):
                rows[name].append(measure_tree(trees[name], agent, plain, tiny))
    _print_real(rows, base, size)


def _print_real(rows: dict[str, list[dict[str, float]]], base: list[dict[str, float]], size: float) -> None:
    import statistics

    med = statistics.median
    names = list(rows)
    j, o = med(b["json"] for b in base), med(b["orjson"] for b in base)
    print(f"  floors: json.loads {j:.2f} s, orjson.loads {o:.2f} s ({size / j:.0f}, {size / o:.0f} MB/s)")
    print(f"\n  {'figure (median of per-round ratios)':<38} {'goal':>9}" + "".join(f" {n:>9}" for n in names))
    for figure, goal, compute in _FIGURES:
        values = [med(compute(f, b) for f, b in zip(rows[n], base, strict=True)) for n in names]
        verdict = ""
        if goal:
            verdict = "  met" if values[-1] <= float(goal.split()[1].rstrip("x")) else "  NOT met"
        print(f"  {figure:<38} {goal:>9}" + "".join(f" {v:>8.2f}x" for v in values) + verdict)
    print(f"\n  {'where the time goes (CPU s, median)':<38} {'':>9}" + "".join(f" {n:>9}" for n in names))
    for stage, compute in (*_SPLIT, ("the whole scan command", lambda f: f["scan"])):
        values = [med(compute(f) for f in rows[n]) for n in names]
        print(f"  {stage:<38} {'':>9}" + "".join(f" {v:>8.2f}s" for v in values))
    rss = [med(f["rss"] for f in rows[n]) for n in names]
    print(f"  {'peak resident memory of the command':<38} {'':>9}" + "".join(f" {v:>7.0f}MB" for v in rss))
    found = {n: sorted({int(f["detections"]) for f in rows[n]}) for n in names}
    exits = {n: sorted({int(f["exit"]) for f in rows[n]}) for n in names}
    same = len({str(v) for v in found.values()}) == 1 and len({str(v) for v in exits.values()}) == 1
    print("  detections (in one process), exit status of the command: "
          + ", ".join(f"{n} {found[n]} {exits[n]}" for n in names) + ("" if same else "  (DIFFER)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--copies", type=int, default=1, help="copies of the real runs (default 1)")
    parser.add_argument("--before", default="0cc1b64", help="the commit measured beside this tree, alternated"
                        " (default 0cc1b64, main before issue 26's scan work; 'none': this tree alone)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-large", action="store_true", help="only the real-traffic figures")
    args = parser.parse_args()
    bench_real(args.copies, args.rounds, None if args.before == "none" else args.before)
    if args.no_large:
        return
    print()
    CACHE.mkdir(parents=True, exist_ok=True)
    clean = CACHE / f"bench-scan-{args.size_mb}mb.jsonl"
    if not clean.exists():
        print(f"generating {clean} ...", flush=True)
        generate(clean, args.size_mb)
    corrupt = CACHE / f"bench-scan-{args.size_mb}mb-corrupt-first.jsonl"
    if not corrupt.exists():
        with open(clean, "rb") as src, open(corrupt, "wb") as dst:
            dst.write(b'{"resourceSpans": [ broken\n')
            while chunk := src.read(1 << 20):
                dst.write(chunk)
    garbage = CACHE / f"bench-scan-{args.size_mb // 10}mb-garbage.txt"
    if not garbage.exists():
        rnd = random.Random(3)
        with open(garbage, "w") as fh:
            size = 0
            while size < args.size_mb * 100_000:
                line = "".join(rnd.choice("abcdef{}[]:, ") for _ in range(120)) + "\n"
                fh.write(line)
                size += len(line)
    scan = [sys.executable, "-m", "otel_progress.cli", "scan", "--no-progress"]
    _, idle_rss, _, _ = run([sys.executable, "-c", "import otel_progress.cli, otel_progress.scan"])
    floor = json_floor(clean)
    size_mb = clean.stat().st_size / 1e6
    print(f"input {size_mb:.0f} MB; interpreter with the command imported: {idle_rss:.0f} MB RSS;"
          f" json.loads of every line: {size_mb / floor:.1f} MB/s\n")
    print(f"{'case':<28} {'exit':>4} {'RSS MB':>8} {'RSS/input':>9} {'RSS/idle':>8} {'MB/s':>7}"
          f" {'vs json':>7} {'stderr lines':>12}")
    report = CACHE / "bench-scan-report.html"
    cases = (("line-delimited", clean, ()), ("line-delimited --html", clean, ("--html", str(report))),
             ("corrupt first line", corrupt, ()), ("garbage (10% size)", garbage, ()))
    for name, path, extra in cases:
        seconds, rss, code, lines = run([*scan, *extra, str(path)])
        mb = path.stat().st_size / 1e6
        print(f"{name:<28} {code:>4} {rss:>8.0f} {rss / mb:>9.2f} {rss / idle_rss:>8.1f} {mb / seconds:>7.1f}"
              f" {(mb / seconds) / (size_mb / floor):>7.2f} {lines:>12}")


if __name__ == "__main__":
    main()
