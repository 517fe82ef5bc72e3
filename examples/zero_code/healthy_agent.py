"""A research agent that reads different files and answers: healthy, left alone.

Instrumented with the OpenTelemetry API only; no otel-progress code. See README.md.
"""

from __future__ import annotations

import json

from opentelemetry import trace

tracer = trace.get_tracer("example.research_agent")

FILES = {f"src/module_{i}.py": f"def handler_{i}():\n    return {i}\n" for i in range(8)}


def read_file(path: str) -> str:
    return FILES[path]


def model_turn(prompt_tokens: int) -> None:
    with tracer.start_as_current_span("chat gpt-4o", attributes={
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
    }) as span:
        span.set_attribute("gen_ai.usage.input_tokens", prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", 60)


def main() -> None:
    with tracer.start_as_current_span("invoke_agent research-agent", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "research-agent",
    }):
        for i, path in enumerate(FILES):
            model_turn(1500 + 400 * i)
            with tracer.start_as_current_span("execute_tool read_file", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
            }) as span:
                content = read_file(path)
                span.set_attribute("gen_ai.tool.call.arguments", json.dumps({"path": path}))
                span.set_attribute("gen_ai.tool.call.result", content)
            print(f"turn {i + 1}: read_file({path!r}) -> {len(content)} bytes")
        model_turn(6000)
        print("answer: the handlers return their index.")


if __name__ == "__main__":
    main()
