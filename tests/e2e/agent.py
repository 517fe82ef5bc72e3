"""An instrumented "agent" for the end-to-end test: the OpenTelemetry SDK with the OTLP/gRPC
exporter sends GenAI spans (invoke_agent, chat, execute_tool, and plain HTTP spans) to the
gateway Collector. Some runs loop (the same tool call with the same result every turn),
the others make progress. Every span it created is written to a manifest (JSON lines).

    python agent.py --endpoint 127.0.0.1:4317 --runs 10 --turns 6 --manifest out.jsonl \
        [--loop-every 3] [--pace 0.01] [--prefix phase1] [--service NAME] [--parallel 1]

With ``--parallel N`` N runs are in flight at once (one thread each, one SDK and exporter
for all), as the runs of N concurrent agent sessions.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


class Recording(SpanExporter):
    """Writes each span it is given to the manifest after the wrapped exporter ran."""

    def __init__(self, inner: SpanExporter, manifest: Any, loops: set[int]) -> None:
        self.inner = inner
        self.manifest = manifest
        self.loops = loops

    def export(self, spans: Any) -> SpanExportResult:
        for s in spans:
            self._write(s)
        return self.inner.export(spans)

    def _write(self, s: ReadableSpan) -> None:
        ctx = s.get_span_context()
        self.manifest.write(json.dumps({
            "trace_id": format(ctx.trace_id, "032x"),
            "span_id": format(ctx.span_id, "016x"),
            "name": s.name,
            "loop": ctx.trace_id in self.loops,
        }) + "\n")
        self.manifest.flush()

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def run(args: argparse.Namespace) -> int:
    resource = Resource.create({"service.name": args.service})
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter(endpoint=args.endpoint, insecure=True, timeout=30)
    loops: set[int] = set()
    with open(args.manifest, "a", encoding="utf-8") as manifest:
        recording = Recording(exporter, manifest, loops)
        provider.add_span_processor(BatchSpanProcessor(
            recording, schedule_delay_millis=100, max_export_batch_size=32, max_queue_size=100_000))
        tracer = provider.get_tracer("e2e.agent", "1.0")
        lock = threading.Lock()

        def one_run(r: int) -> None:
            is_loop = args.loop_every > 0 and r % args.loop_every == 0
            with tracer.start_as_current_span(f"invoke_agent {args.prefix}-agent", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"{args.prefix}-agent",
            }) as root:
                if is_loop:
                    with lock:
                        loops.add(root.get_span_context().trace_id)
                for turn in range(1, args.turns + 1):
                    with tracer.start_as_current_span("chat gpt-test", attributes={
                        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-test",
                        "gen_ai.usage.input_tokens": 400 + turn, "gen_ai.usage.output_tokens": 20,
                    }), tracer.start_as_current_span("POST /v1/chat/completions", attributes={
                        "http.request.method": "POST", "server.address": "llm.invalid",
                    }):
                        time.sleep(args.pace)
                    query = "status of order 42" if is_loop else f"{args.prefix} topic {r}.{turn}"
                    result = {"order": 42, "hits": ["faq-7"]} if is_loop else {"hits": [f"doc-{r}-{turn}"]}
                    with tracer.start_as_current_span("execute_tool lookup", attributes={
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
                        "gen_ai.tool.call.arguments": json.dumps({"query": query}),
                        "gen_ai.tool.call.result": json.dumps(result),
                    }), tracer.start_as_current_span("GET /orders", attributes={
                        "http.request.method": "GET", "server.address": "orders.invalid",
                    }):
                        time.sleep(args.pace)

        with ThreadPoolExecutor(max(1, args.parallel)) as pool:
            for done in [pool.submit(one_run, r) for r in range(args.runs)]:
                done.result()
        ok = provider.force_flush(60_000)
        provider.shutdown()
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--loop-every", type=int, default=3)
    p.add_argument("--pace", type=float, default=0.01)
    p.add_argument("--prefix", default="run")
    p.add_argument("--service", default="e2e-agent")
    p.add_argument("--manifest", required=True)
    p.add_argument("--parallel", type=int, default=1, help="runs in flight at once (default 1: one after the other)")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
