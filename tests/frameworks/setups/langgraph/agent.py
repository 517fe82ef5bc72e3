"""LangGraph / LangChain: ``langchain.agents.create_agent`` (a LangGraph graph) with two
``@tool`` functions on a scripted LangChain chat model (a ``BaseChatModel`` that plays the
scenario's script, as LangChain's own fake chat models do, with tool calling)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_common"))

import scripted
from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool


class ScriptedChatModel(BaseChatModel):
    """Answers from the number of tool results in the conversation."""

    scenario: str

    @property
    def _llm_type(self) -> str:
        return "scripted-chat"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        done = sum(isinstance(m, ToolMessage) for m in messages)
        step = scripted.next_step(self.scenario, done)
        usage = {"input_tokens": 120, "output_tokens": 20, "total_tokens": 140}
        if isinstance(step, str):
            message = AIMessage(content=step, usage_metadata=usage)
        else:
            name, args = step
            message = AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{done}"}],
                                usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order by its id and return its record as JSON."""
    return scripted.lookup_order(order_id)


@tool
def search_docs(query: str) -> str:
    """Search the help-centre documents; returns the matching passages as JSON."""
    return scripted.search_docs(query)


def main() -> None:
    scenario = scripted.scenario_from_argv()
    agent = create_agent(ScriptedChatModel(scenario=scenario), tools=[lookup_order, search_docs],
                         system_prompt="Answer using the tools.", name="support-agent")
    state = agent.invoke({"messages": [("user", "What is the status of my order and the refund policy?")]},
                         {"recursion_limit": 60})
    print("final answer:", state["messages"][-1].content)


if __name__ == "__main__":
    main()
