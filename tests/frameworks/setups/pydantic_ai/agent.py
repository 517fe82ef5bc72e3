"""Pydantic AI: a real ``Agent`` with two tools on pydantic-ai's own ``FunctionModel``,
which plays the scenario's script. Pydantic AI has no instrumentor entry point: its docs
enable the OpenTelemetry spans with one line, ``Agent.instrument_all()``, on the global
tracer provider (which ``opentelemetry-instrument`` configured).

Issue 29's model scenarios (``text_*``, ``reasoning_*``, ``unknown_tool*``) play
``scripted.model_script`` the way a user meets them: the agent's ``output_validator`` rejects
an answer that names no order with ``ModelRetry`` (pydantic-ai sends it back), a
thinking-only response is re-prompted by pydantic-ai itself, and a request of a tool the
agent does not have is answered with pydantic-ai's "Unknown tool name" retry prompt; the
retry budget (``retries``) is raised so the script ends with its answer. ``refused_tool*``:
``cancel_order`` is a ``requires_approval`` tool, so the run ends with ``DeferredToolRequests``;
the application refuses (``ToolDenied``) and runs the agent on with the message history, as
pydantic-ai's human-in-the-loop docs show (one conversation, ``gen_ai.conversation.id``
carried over from the history; one agent run per refusal).

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
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ModelRetry, ToolDenied
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=scripted.ALL_SCENARIOS)
    parser.add_argument("--version", type=int, help="InstrumentationSettings(version=N); default: the library's")
    parser.add_argument("--openinference", action="store_true", help="register OpenInferenceSpanProcessor")
    args = parser.parse_args()

    if args.openinference:
        from openinference.instrumentation.pydantic_ai import OpenInferenceSpanProcessor

        trace.get_tracer_provider().add_span_processor(OpenInferenceSpanProcessor())  # type: ignore[attr-defined]
    Agent.instrument_all(InstrumentationSettings(version=args.version) if args.version else True)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if args.scenario in scripted.MODEL_SCENARIOS:
            responses = sum(isinstance(m, ModelResponse) for m in messages)
            move = scripted.model_move(args.scenario, responses)
            parts: list = []
            if move["reasoning"]:
                parts.append(ThinkingPart(move["reasoning"]))
            if move["text"]:
                parts.append(TextPart(move["text"]))
            if move["tool"]:
                name, call_args = move["tool"]
                parts.append(ToolCallPart(name, call_args, tool_call_id=f"call_{responses}"))
            return ModelResponse(parts=parts)
        done = sum(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts)
        step = scripted.next_step(args.scenario, done)
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        name, call_args = step
        return ModelResponse(parts=[ToolCallPart(name, call_args, tool_call_id=f"call_{done}")])

    refusing = args.scenario.startswith("refused_")
    agent = Agent(FunctionModel(model), name="support-agent", instructions="Answer using the tools.",
                  retries=scripted.MODEL_LOOP_TURNS + 2,
                  output_type=[str, DeferredToolRequests] if refusing else str)  # type: ignore[arg-type]

    if args.scenario.startswith("text_"):
        @agent.output_validator
        def names_the_order(output: str) -> str:
            if not scripted.answer_accepted(output):
                raise ModelRetry(scripted.REJECTION)
            return output

    @agent.tool_plain
    def lookup_order(order_id: str) -> str:
        """Look up an order by its id and return its record as JSON."""
        return scripted.lookup_order(order_id)

    @agent.tool_plain
    def search_docs(query: str) -> str:
        """Search the help-centre documents; returns the matching passages as JSON."""
        return scripted.search_docs(query)

    if refusing:
        @agent.tool_plain(requires_approval=True)
        def cancel_order(order_id: str) -> str:
            """Cancel an order (needs the user's approval)."""
            return scripted.cancel_order(order_id)

    result = agent.run_sync("What is the status of my order and the refund policy?")
    for _ in range(scripted.MODEL_LOOP_TURNS + 2):
        if not isinstance(result.output, DeferredToolRequests):
            break
        denied = {call.tool_call_id: ToolDenied(scripted.REFUSAL) for call in result.output.approvals}
        result = agent.run_sync(message_history=result.all_messages(),
                                deferred_tool_results=DeferredToolResults(approvals=denied))
    print("final answer:", result.output)


if __name__ == "__main__":
    main()
