"""An MCP client in the shape OpenLLMetry's MCP instrumentation gives it: every tool call a
root span ``search_docs.tool`` of its own trace, on the global tracer provider (run it under
``opentelemetry-instrument``). ``--conversation NAME`` names the conversation the calls
belong to, as docs/runs.md advises: ``gen_ai.conversation.id`` in the baggage, copied onto
the spans by OpenTelemetry's BaggageSpanProcessor."""

from __future__ import annotations

import json
import sys

from opentelemetry import baggage, context, trace

if "--conversation" in sys.argv:
    from opentelemetry.processor.baggage import ALLOW_ALL_BAGGAGE_KEYS, BaggageSpanProcessor

    trace.get_tracer_provider().add_span_processor(BaggageSpanProcessor(ALLOW_ALL_BAGGAGE_KEYS))  # type: ignore[attr-defined]
    context.attach(baggage.set_baggage("gen_ai.conversation.id", sys.argv[sys.argv.index("--conversation") + 1]))

tracer = trace.get_tracer("opentelemetry.instrumentation.mcp")
for _ in range(5):
    with tracer.start_as_current_span("search_docs.tool", attributes={
            "traceloop.span.kind": "tool", "traceloop.entity.name": "search_docs",
            "traceloop.entity.input": json.dumps({"tool_name": "search_docs", "arguments": {"query": "refunds"}}),
            "traceloop.entity.output": json.dumps({"result": "no match"})}):
        pass
print("done")
