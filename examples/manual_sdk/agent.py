"""Manual SDK setup: the progress processor wraps the exporting processor.

    ProgressSpanProcessor(BatchSpanProcessor(exporter))

The exporter here prints OTLP/JSON lines to a file (``agent-spans.jsonl``) so the result
can be read back with ``otel-progress scan``; any exporter works the same way (OTLP,
console, ...). The agent itself is instrumented with the OpenTelemetry API only.
"""

from __future__ import annotations

import json
import sys

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_progress import Config, ProgressSpanProcessor
from otel_progress.demo import OtlpJsonFileExporter

OUTPUT = sys.argv[1] if len(sys.argv) > 1 else "agent-spans.jsonl"

provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
provider.add_span_processor(
    ProgressSpanProcessor(
        BatchSpanProcessor(OtlpJsonFileExporter(OUTPUT)),
        config=Config.from_env(),  # OTEL_PROGRESS_* variables, or Config(...) in code
    )
)
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("example.support_agent")

ORDERS = {"get_order": {"status": "shipped"}, "get_shipment": {"eta": "Friday"}}


def call_tool(name: str, arguments: dict[str, object]) -> dict[str, object]:
    with tracer.start_as_current_span(f"execute_tool {name}", attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
    }) as span:
        result = ORDERS[name]
        span.set_attribute("gen_ai.tool.call.arguments", json.dumps(arguments))
        span.set_attribute("gen_ai.tool.call.result", json.dumps(result))
        return result


# The support agent of the trace examples: it alternates between two lookups that keep
# answering the same thing (a repeat cycle of period 2).
with tracer.start_as_current_span("invoke_agent support-agent", attributes={
    "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support-agent",
}):
    for turn in range(8):
        tool = "get_order" if turn % 2 == 0 else "get_shipment"
        print(f"turn {turn + 1}: {tool} -> {call_tool(tool, {'id': 123})}")

provider.shutdown()  # flushes the batch processor
print(f"spans written to {OUTPUT}; try: otel-progress scan --format table {OUTPUT}")
