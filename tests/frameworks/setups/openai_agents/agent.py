"""OpenAI Agents SDK: a real ``Agent`` with two function tools, run by ``Runner`` on the
SDK's own chat-completions model pointed at the scripted fake OpenAI server."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_common"))

import scripted
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
from openai import AsyncOpenAI


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order by its id and return its record as JSON."""
    return scripted.lookup_order(order_id)


@function_tool
def search_docs(query: str) -> str:
    """Search the help-centre documents; returns the matching passages as JSON."""
    return scripted.search_docs(query)


def main() -> None:
    scenario = scripted.scenario_from_argv()
    with scripted.FakeOpenAI(scenario) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="not-a-real-key", max_retries=0)
        agent = Agent(
            name="support-agent",
            instructions="Answer the customer's question using the tools.",
            tools=[lookup_order, search_docs],
            model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client),
        )
        result = Runner.run_sync(agent, "What is the status of my order and the refund policy?", max_turns=30)
    print("final answer:", result.final_output)


if __name__ == "__main__":
    main()
