"""A docs agent that keeps rephrasing a search that returns nothing (seed 000).

It is instrumented with the OpenTelemetry API only (GenAI semantic conventions) and
contains no otel-progress code. Run it under ``opentelemetry-instrument`` with
otel-progress installed and the loop shows up on its spans; see README.md.
"""

from __future__ import annotations

import json

from opentelemetry import trace

tracer = trace.get_tracer("example.docs_agent")

QUERIES = [
    "refund policy",
    "refund policy annual plans",
    "annual plan refund rules",
    "what is the refund policy for annual subscriptions",
    "refunds yearly subscription",
    "annual subscription cancellation refund",
    "refund terms annual billing",
    "money back annual plan",
]


def search_docs(query: str) -> dict[str, object]:
    """The docs index has nothing on refunds: every query comes back empty."""
    return {"results": [], "total": 0}


def model_turn(prompt_tokens: int) -> None:
    with tracer.start_as_current_span("chat gpt-4o", attributes={
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
    }) as span:
        span.set_attribute("gen_ai.usage.input_tokens", prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", 40)


def main() -> None:
    with tracer.start_as_current_span("invoke_agent docs-agent", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "docs-agent",
    }):
        for i, query in enumerate(QUERIES):
            model_turn(2000 + 900 * i)
            with tracer.start_as_current_span("execute_tool search_docs", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_docs",
            }) as span:
                arguments = {"q": query}
                result = search_docs(query)
                span.set_attribute("gen_ai.tool.call.arguments", json.dumps(arguments))
                span.set_attribute("gen_ai.tool.call.result", json.dumps(result))
            print(f"turn {i + 1}: search_docs({query!r}) -> {result['total']} results")
        model_turn(9000)
        print("answer: I could not find the refund policy.")


if __name__ == "__main__":
    main()
