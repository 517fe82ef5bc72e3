"""`otel-progress serve` under stress: resident memory under a churn of distinct traces,
and the wait of small requests sent while a large one is being handled.

Run: ``python bench/bench_service_limits.py [--mode churn|wait|both] [--seconds 60]
[--baseline-tree PATH]``

``churn``: the service (defaults, so the default memory budget) receives, for
``--seconds``, requests of new traces that never end (no root span, distinct calls: no
detection closes them, the idle TTL is longer than the run); each request carries two
traces of 150 model and 150 tool spans. Every 5 s the service's resident memory
(``VmRSS``), the state it estimates holding (``progress_service_state_bytes``), the
traces held and those evicted for the budget are printed; then the same with
``--max-state-mib 100000`` (no effective budget, what the service held before it had
one; stopped early above 2 GiB RSS), side by side.

``wait``: one request of 100,000 spans (2,000 traces of 50 spans, half of them tool
spans: ``--tool-every``) is sent, and while it is handled a small request (one trace of 50 spans) every 50 ms; the
small requests' latencies (median, max) and the large one's are printed, for
``--rounds`` rounds (the worst wait depends on when a small request meets the large one). With
``--baseline-tree PATH`` (a checkout of an earlier commit, e.g. ``git worktree add
/tmp/before <commit>``) the same is measured with that tree's service first.

Everything runs on 127.0.0.1; the downstream is a sink that only acknowledges. Exit
status 0: the figures are for reading.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_service import free_port, stop_process, wait_port  # noqa: E402

METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
T0 = 1_700_000_000_000_000_000


# -- workload ---------------------------------------------------------------------------


def _kv(key: str, value: Any) -> Any:
    from opentelemetry.proto.common.v1 import common_pb2

    if isinstance(value, int):
        return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(int_value=value))
    return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=str(value)))


def _request(traces: list[list[Any]]) -> bytes:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.resource.v1 import resource_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    rs = trace_pb2.ResourceSpans(resource=resource_pb2.Resource(attributes=[_kv("service.name", "bench-agent")]))
    ss = rs.scope_spans.add(scope=common_pb2.InstrumentationScope(name="bench"))
    for spans in traces:
        ss.spans.extend(spans)
    return trace_service_pb2.ExportTraceServiceRequest(resource_spans=[rs]).SerializeToString()


def _span(trace_id: bytes, n: int, start: int, name: str, attrs: dict[str, Any], parent: int = 1) -> Any:
    from opentelemetry.proto.trace.v1 import trace_pb2

    s = trace_pb2.Span(trace_id=trace_id, span_id=n.to_bytes(8, "big"), parent_span_id=parent.to_bytes(8, "big"),
                       name=name, start_time_unix_nano=start, end_time_unix_nano=start + 500_000,
                       kind=trace_pb2.Span.SPAN_KIND_INTERNAL)
    s.attributes.extend(_kv(k, v) for k, v in attrs.items())
    return s


def churn_template(calls: int = 150) -> tuple[bytes, bytes, bytes]:
    """A request of two open traces (model + tool span per turn, distinct calls) and the
    two placeholder trace ids to replace for each new request."""
    a, b = b"\xaa" * 15 + b"\x01", b"\xaa" * 15 + b"\x02"
    traces = []
    for tid in (a, b):
        spans = []
        for t in range(1, calls + 1):
            start = T0 + t * 2_000_000
            spans.append(_span(tid, 10_000 + t, start - 1_000_000, "chat model", {
                "gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 900, "gen_ai.usage.output_tokens": 40}))
            spans.append(_span(tid, 20_000 + t, start, "execute_tool read_file", {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
                "gen_ai.agent.name": "coder",
                "gen_ai.tool.call.arguments": f'{{"path": "src/module_{t}.py"}}',
                "gen_ai.tool.call.result": f'{{"lines": {t * 7}, "text": "def f_{t}(): return {t}"}}'}))
        traces.append(spans)
    return _request(traces), a, b


def wait_requests(tool_every: int = 10, traces: int = 2000) -> tuple[bytes, list[bytes]]:
    """The large request (100,000 spans in ``traces`` traces, one tool span in
    ``tool_every``) and small ones (one trace of 50 spans each)."""
    rnd = random.Random(5)

    def trace(tid: bytes, base: int, n: int = 50) -> list[Any]:
        spans = []
        for i in range(n):
            start = T0 + i * 1_000_000
            if i % tool_every == tool_every // 2:
                spans.append(_span(tid, base + i, start, "execute_tool search_docs", {
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_docs",
                    "gen_ai.tool.call.arguments": f'{{"query": "q{rnd.randrange(10**6)}"}}',
                    "gen_ai.tool.call.result": f'{{"items": [{rnd.randrange(10**6)}]}}'}))
            else:
                spans.append(_span(tid, base + i, start, "GET /api/v1/items", {
                    "http.request.method": "GET", "url.full": f"https://svc.invalid/{i}",
                    "http.response.status_code": 200}))
        return spans

    large = _request([trace((10**6 + k).to_bytes(16, "big"), 100, 100_000 // traces) for k in range(traces)])
    small = [_request([trace((2 * 10**6 + k).to_bytes(16, "big"), 100)]) for k in range(400)]
    return large, small


# -- processes --------------------------------------------------------------------------


def _spawn(args: list[str], tree: Path = REPO, **kw: Any) -> subprocess.Popen[str]:
    path = os.pathsep.join([str(tree), str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    # cwd: ``python -c`` puts the working directory first on sys.path, before PYTHONPATH
    return subprocess.Popen([sys.executable, *args], env=env, text=True, cwd=tree, **kw)


class Service:
    """``otel-progress serve`` from ``tree`` as a subprocess, forwarding to ``sink``."""

    def __init__(self, sink: int, extra: list[str], tree: Path = REPO) -> None:
        self.port = free_port()
        self.health = free_port()
        self.proc = _spawn(["-c", "import sys; sys.argv[0] = 'otel-progress';"
                            " from otel_progress.cli import main; sys.exit(main(sys.argv[1:]))",
                            "serve", "--listen", f"127.0.0.1:{self.port}", "--forward-endpoint",
                            f"127.0.0.1:{sink}", "--health-listen", f"127.0.0.1:{self.health}",
                            "--log-level", "warning", *extra], tree, stderr=subprocess.DEVNULL)
        wait_port(self.port)
        wait_port(self.health)

    def rss_mib(self) -> float:
        try:
            with open(f"/proc/{self.proc.pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def metric(self, name: str, labels: str = "") -> float:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health}/metrics", timeout=5) as resp:
                text = resp.read().decode()
        except OSError:
            return float("nan")
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and (not labels or labels in line):
                head, _, value = line.rpartition(" ")
                if head.split("{")[0] == name:
                    total += float(value)
        return total

    def stop(self) -> None:
        stop_process(self.proc)


def _channel(port: int) -> tuple[Any, Any]:
    import grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 128 << 20)])
    grpc.channel_ready_future(channel).result(timeout=30)
    return channel, channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)


# -- churn ------------------------------------------------------------------------------


def churn(sink: int, seconds: float, extra: list[str], label: str, rss_cap_mib: float) -> list[tuple[Any, ...]]:
    import grpc

    svc = Service(sink, ["--trace-ttl", str(seconds * 10), *extra])
    template, a, b = churn_template()
    _channel_obj, call = _channel(svc.port)
    stop = threading.Event()
    sent = [0, 0]
    lock = threading.Lock()
    counter = [0]

    def worker() -> None:
        while not stop.is_set():
            with lock:
                counter[0] += 1
                n = counter[0]
            raw = template.replace(a, n.to_bytes(8, "big") * 2).replace(b, (n + 10**9).to_bytes(8, "big") * 2)
            try:
                call(raw, timeout=30)
                ok = 0
            except grpc.RpcError:
                ok = 1
            with lock:
                sent[ok] += 1

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(4)]
    rows: list[tuple[Any, ...]] = []
    t0 = time.monotonic()
    for t in threads:
        t.start()
    try:
        while True:
            time.sleep(5)
            elapsed = time.monotonic() - t0
            rss = svc.rss_mib()
            row = (round(elapsed), rss, svc.metric("progress_service_state_bytes") / 2**20,
                   int(svc.metric("progress_service_state_traces")),
                   int(svc.metric("progress_service_traces_evicted_early_total", 'reason="memory_budget"')),
                   sent[0] * 2)
            rows.append(row)
            print(f"  {label:<22} {row[0]:>4}s  RSS {row[1]:7.0f} MiB  state {row[2]:7.0f} MiB"
                  f"  traces held {row[3]:>6}  evicted for the budget {row[4]:>6}  traces sent {row[5]:>6}",
                  flush=True)
            if elapsed >= seconds or rss > rss_cap_mib:
                break
    finally:
        stop.set()
        for t in threads:
            t.join(35)
        svc.stop()
    return rows


# -- wait -------------------------------------------------------------------------------


def wait(sink: int, tree: Path, label: str, tool_every: int, traces: int) -> dict[str, float]:
    svc = Service(sink, [], tree)
    large, small = wait_requests(tool_every, traces)
    _ch, call = _channel(svc.port)
    try:
        for raw in small[:5]:  # warm up the channel and the service
            call(raw, timeout=30)
        done = threading.Event()
        large_s = [0.0]

        def send_large() -> None:
            t = time.monotonic()
            try:
                call(large, timeout=60)
            finally:
                large_s[0] = time.monotonic() - t
                done.set()

        threading.Thread(target=send_large, daemon=True).start()
        time.sleep(0.05)
        waits: list[float] = []
        for raw in small[5:]:
            if done.is_set():
                break
            t = time.monotonic()
            call(raw, timeout=60)
            waits.append(time.monotonic() - t)
            time.sleep(0.05)
        done.wait(60)
    finally:
        svc.stop()
    result = {"large_s": large_s[0], "n": len(waits), "median_s": statistics.median(waits) if waits else 0.0,
              "max_s": max(waits) if waits else 0.0}
    print(f"  {label:<28} large request {result['large_s']:.2f} s; {result['n']} small requests meanwhile:"
          f" median {result['median_s'] * 1000:.0f} ms, max {result['max_s'] * 1000:.0f} ms", flush=True)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("churn", "wait", "both"), default="both")
    p.add_argument("--seconds", type=float, default=60.0, help="churn duration (default 60)")
    p.add_argument("--baseline-tree", type=Path, help="checkout of an earlier commit to compare the wait with")
    p.add_argument("--no-unbounded", action="store_true", help="churn: skip the run without a budget")
    p.add_argument("--rounds", type=int, default=3, help="wait: rounds per tree (default 3)")
    p.add_argument("--large-traces", type=int, default=2000,
                   help="wait: traces in the large request (default 2000 of 50 spans; 1: one trace)")
    p.add_argument("--tool-every", type=int, default=2,
                   help="wait: one span in N of the large request is a tool span (default 2: 50,000 tool calls)")
    opts = p.parse_args()
    sink = free_port()
    sink_proc = _spawn([str(REPO / "bench" / "bench_service.py"), "--role", "sink", "--port", str(sink)])
    try:
        wait_port(sink)
        if opts.mode in ("wait", "both"):
            print(f"small requests sent while a 100,000-span request ({opts.large_traces} traces,"
                  f" {100_000 // opts.tool_every:,} tool spans) is handled:")
            trees = [("before", opts.baseline_tree.resolve())] if opts.baseline_tree else []
            trees.append(("now", REPO))
            worst: dict[str, list[float]] = {name: [] for name, _ in trees}
            for r in range(opts.rounds):
                for name, tree in trees:
                    res = wait(sink, tree, f"round {r + 1}, {name}", opts.tool_every, opts.large_traces)
                    worst[name].append(res["max_s"])
            for name, maxima in worst.items():
                print(f"  {name:<7} max wait of a small request per round: "
                      + ", ".join(f"{m:.2f} s" for m in maxima) + f"; worst {max(maxima):.2f} s")
            if "before" in worst:
                print(f"  worst wait: before {max(worst['before']):.2f} s, now {max(worst['now']):.2f} s"
                      f" ({max(worst['before']) / max(max(worst['now']), 1e-9):.1f}x)")
        if opts.mode in ("churn", "both"):
            print(f"churn of distinct open traces for {opts.seconds:g}s (two of 300 spans per request, 4 in flight):")
            bounded = churn(sink, opts.seconds, [], "default budget", 4096)
            peak = max(r[1] for r in bounded)
            print(f"  default budget: peak RSS {peak:.0f} MiB, final {bounded[-1][1]:.0f} MiB, state"
                  f" {bounded[-1][2]:.0f} MiB estimated (budget 384 MiB), {bounded[-1][4]} traces evicted for it")
            if not opts.no_unbounded:
                free = churn(sink, opts.seconds, ["--max-state-mib", "100000"], "no budget", 2048)
                peak_free = max(r[1] for r in free)
                print(f"  side by side at {free[-1][0]}s: no budget {free[-1][1]:.0f} MiB RSS vs default budget"
                      f" {next((r[1] for r in bounded if r[0] >= free[-1][0]), bounded[-1][1]):.0f} MiB;"
                      f" peak {peak_free:.0f} vs {peak:.0f} MiB ({peak_free / peak:.2f}x)")
    finally:
        stop_process(sink_proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
