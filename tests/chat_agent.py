"""A scripted multi-turn chat agent on the real OpenTelemetry SDK: one trace per user turn,
each an ``invoke_agent`` span with its ``chat`` and ``execute_tool`` spans, and
``gen_ai.conversation.id`` on every span (the conversation scope, docs/detection.md).

A *looping* conversation does the same lookups with the same answers turn after turn; a
*healthy* one asks about a new order each turn and gets new answers. Importable
(:func:`chat_turns`) and runnable, exporting OTLP/gRPC (the Collector tests):

    python -m tests.chat_agent --endpoint 127.0.0.1:4317 --conversation c1 --turns 4 [--healthy]
        [--no-conversation] [--session-attribute session.id]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from opentelemetry.trace import Tracer

#: The lookups a looping turn makes, with the world's answers (the same every turn).
LOOP_LOOKUPS: tuple[tuple[str, dict[str, Any], dict[str, Any]], ...] = (
    ("get_order", {"order_id": "A-1001"}, {"status": "shipped", "carrier": "unknown"}),
    ("track_parcel", {"order_id": "A-1001"}, {"events": [], "note": "no tracking yet"}),
)


def lookups(turn: int, healthy: bool) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """The tool calls of one turn: a new order each turn (healthy), or the same lookups."""
    if not healthy:
        return list(LOOP_LOOKUPS)
    order = f"B-{2000 + turn}"
    return [("get_order", {"order_id": order}, {"status": "delivered", "order_id": order, "day": turn})]


def chat_turns(tracer: Tracer, conversation: str | None, turns: int, *, healthy: bool = False,
               attribute: str = "gen_ai.conversation.id") -> list[str]:
    """Emit ``turns`` turns of one conversation (``conversation`` None: spans naming none);
    returns the hex trace id of each turn."""
    ids = {attribute: conversation} if conversation is not None else {}
    traces: list[str] = []
    for turn in range(turns):
        with tracer.start_as_current_span("invoke_agent support", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support", **ids}) as agent:
            traces.append(format(agent.get_span_context().trace_id, "032x"))
            with tracer.start_as_current_span("chat gpt-4o", attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o", **ids}) as chat:
                chat.set_attribute("gen_ai.usage.input_tokens", 900)
                chat.set_attribute("gen_ai.usage.output_tokens", 40)
            for name, arguments, result in lookups(turn, healthy):
                with tracer.start_as_current_span(f"execute_tool {name}", attributes={
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, **ids}) as tool:
                    tool.set_attribute("gen_ai.tool.call.arguments", json.dumps(arguments))
                    tool.set_attribute("gen_ai.tool.call.result", json.dumps(result))
    return traces


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--conversation", default="conv-1")
    parser.add_argument("--no-conversation", action="store_true", help="spans name no conversation")
    parser.add_argument("--attribute", default="gen_ai.conversation.id")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--healthy", action="store_true")
    parser.add_argument("--service", default="chat-agent")
    args = parser.parse_args(argv)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": args.service}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=args.endpoint, insecure=True,
                                                                     timeout=30)))
    traces = chat_turns(provider.get_tracer("chat-agent"), None if args.no_conversation else args.conversation,
                        args.turns, healthy=args.healthy, attribute=args.attribute)
    provider.shutdown()
    print("\n".join(traces))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
