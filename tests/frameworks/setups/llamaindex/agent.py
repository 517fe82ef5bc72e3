"""LlamaIndex: a ``FunctionAgent`` (default) or ``ReActAgent`` (``--react``) with two
``FunctionTool``s, on llama-index's OpenAI LLM pointed at the scripted fake OpenAI server
(function calling for FunctionAgent, ReAct text for ReActAgent)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_common"))

import scripted
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai import OpenAI


def lookup_order(order_id: str) -> str:
    """Look up an order by its id and return its record as JSON."""
    return scripted.lookup_order(order_id)


def search_docs(query: str) -> str:
    """Search the help-centre documents; returns the matching passages as JSON."""
    return scripted.search_docs(query)


async def run(scenario: str, react: bool) -> str:
    with scripted.FakeOpenAI(scenario, react=react) as server:
        llm = OpenAI(model="gpt-4o-mini", api_base=server.base_url, api_key="not-a-real-key", max_retries=0)
        tools = [FunctionTool.from_defaults(lookup_order), FunctionTool.from_defaults(search_docs)]
        kind = ReActAgent if react else FunctionAgent
        agent = kind(name="support-agent", description="Answers customer questions.", tools=tools, llm=llm,
                     system_prompt="Answer using the tools.")
        response = await agent.run("What is the status of my order and the refund policy?", max_iterations=40)
        return str(response)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=scripted.SCENARIOS)
    parser.add_argument("--react", action="store_true", help="ReActAgent instead of FunctionAgent")
    args = parser.parse_args()
    print("final answer:", asyncio.run(run(args.scenario, args.react)))


if __name__ == "__main__":
    main()
