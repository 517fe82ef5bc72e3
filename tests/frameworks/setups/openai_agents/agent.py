"""OpenAI Agents SDK: a real ``Agent`` with two function tools, run by ``Runner`` on the
SDK's own chat-completions model pointed at the scripted fake OpenAI server.

Issue 29's model scenarios, as the SDK meets them: ``unknown_tool*`` with
``RunConfig(tool_not_found_behavior="return_error_to_model")`` (the SDK's documented way to
feed "Tool '<name>' not found." back to the model instead of raising ``ModelBehaviorError``);
``reasoning_*`` with a structured ``output_type``: a response with reasoning
(``reasoning_content``) and no message has no final output, so the runner asks the model
again. A text-only answer always ends the run in this SDK (plain text is the final output,
text that fails a structured ``output_type`` raises ``ModelBehaviorError``): no text loop.
``refused_tool*``: ``cancel_order`` is a ``needs_approval`` function tool, so the run stops with
``interruptions``; the application rejects each (``RunState.reject`` with a
``rejection_message``) and resumes the run from its state, as the SDK's human-in-the-loop
docs show, all within one ``trace()`` (the SDK's way to make several runs one workflow).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_common"))

import scripted
from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool, trace
from openai import AsyncOpenAI
from pydantic import BaseModel


class OrderAnswer(BaseModel):
    answer: str


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order by its id and return its record as JSON."""
    return scripted.lookup_order(order_id)


@function_tool
def search_docs(query: str) -> str:
    """Search the help-centre documents; returns the matching passages as JSON."""
    return scripted.search_docs(query)


@function_tool(needs_approval=True)
def cancel_order(order_id: str) -> str:
    """Cancel an order (needs the user's approval)."""
    return scripted.cancel_order(order_id)


def main() -> None:
    scenario = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in scripted.ALL_SCENARIOS else (
        scripted.scenario_from_argv())
    reasoning = scenario.startswith("reasoning_")
    with scripted.FakeOpenAI(scenario, answer_key="answer" if reasoning else "") as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="not-a-real-key", max_retries=0)
        agent = Agent(
            name="support-agent",
            instructions="Answer the customer's question using the tools.",
            tools=[lookup_order, search_docs, *([cancel_order] if scenario.startswith("refused_") else [])],
            model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client),
            output_type=OrderAnswer if reasoning else str,
        )
        config = RunConfig(tool_not_found_behavior="return_error_to_model")
        refusing = scenario.startswith("refused_")
        with trace("support-conversation") if refusing else contextlib.nullcontext():
            result = Runner.run_sync(agent, "What is the status of my order and the refund policy?", max_turns=30,
                                     run_config=config)
            for _ in range(scripted.MODEL_LOOP_TURNS + 2):
                if not result.interruptions:
                    break
                state = result.to_state()
                for item in result.interruptions:
                    state.reject(item, rejection_message=scripted.REFUSAL)
                result = Runner.run_sync(agent, state, max_turns=30, run_config=config)
    print("final answer:", result.final_output)


if __name__ == "__main__":
    main()
