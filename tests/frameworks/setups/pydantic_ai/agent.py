"""Pydantic AI: a real ``Agent`` with two tools on pydantic-ai's own ``FunctionModel``,
which plays the scenario's script. Pydantic AI has no instrumentor entry point: its docs
enable the OpenTelemetry spans with one line, ``Agent.instrument_all()``, on the global
tracer provider (which ``opentelemetry-instrument`` configured).

Flags: ``--version N`` passes ``InstrumentationSettings(version=N)``; ``--openinference``
also registers OpenInference's ``OpenInferenceSpanProcessor`` on the provider (one line,
as openinference-instrumentation-pydantic-ai's docs say).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_common"))

import scripted
from opentelemetry import trace
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=scripted.SCENARIOS)
    parser.add_argument("--version", type=int, help="InstrumentationSettings(version=N); default: the library's")
    parser.add_argument("--openinference", action="store_true", help="register OpenInferenceSpanProcessor")
    args = parser.parse_args()

    if args.openinference:
        from openinference.instrumentation.pydantic_ai import OpenInferenceSpanProcessor

        trace.get_tracer_provider().add_span_processor(OpenInferenceSpanProcessor())  # type: ignore[attr-defined]
    Agent.instrument_all(InstrumentationSettings(version=args.version) if args.version else True)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts)
        step = scripted.next_step(args.scenario, done)
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        name, call_args = step
        return ModelResponse(parts=[ToolCallPart(name, call_args, tool_call_id=f"call_{done}")])

    agent = Agent(FunctionModel(model), name="support-agent", instructions="Answer using the tools.")

    @agent.tool_plain
    def lookup_order(order_id: str) -> str:
        """Look up an order by its id and return its record as JSON."""
        return scripted.lookup_order(order_id)

    @agent.tool_plain
    def search_docs(query: str) -> str:
        """Search the help-centre documents; returns the matching passages as JSON."""
        return scripted.search_docs(query)

    result = agent.run_sync("What is the status of my order and the refund policy?")
    print("final answer:", result.output)


if __name__ == "__main__":
    main()
