"""LangGraph / LangChain: ``langchain.agents.create_agent`` (a LangGraph graph) with two
``@tool`` functions on a scripted LangChain chat model (a ``BaseChatModel`` that plays the
scenario's script, as LangChain's own fake chat models do, with tool calling).

Issue 29's model scenarios, as a LangChain 1.x user meets them: ``text_*`` and
``reasoning_*`` with an ``after_model`` middleware that checks the answer (it must name the
order) and, when it does not, adds the feedback as a message and jumps back to the model
(``jump_to="model"``, the documented way to loop a graph edge back); reasoning comes as a
standard ``reasoning`` content block. ``unknown_tool*``: ``create_agent``'s ``ToolNode``
answers a tool it does not have with an error ``ToolMessage`` ("Error: <name> is not a valid
tool, try one of [...]") and the model is called again. ``refused_tool*``: ``cancel_order`` is
gated by ``HumanInTheLoopMiddleware`` (with a checkpointer, as its docs say); each interrupt is
answered with ``Command(resume={"decisions": [{"type": "reject", "message": REFUSAL}]})`` on
the same thread, one graph invocation per refusal."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_common"))

import scripted
from langchain.agents import AgentState, create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware, after_model
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command


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
        usage = {"input_tokens": 120, "output_tokens": 20, "total_tokens": 140}
        if self.scenario in scripted.MODEL_SCENARIOS:
            responses = sum(isinstance(m, AIMessage) for m in messages)
            move = scripted.model_move(self.scenario, responses)
            content: list[Any] = []
            if move["reasoning"]:
                content.append({"type": "reasoning", "reasoning": move["reasoning"]})
            if move["text"]:
                content.append({"type": "text", "text": move["text"]})
            calls = []
            if move["tool"]:
                name, args = move["tool"]
                calls.append({"name": name, "args": args, "id": f"call_{responses}"})
            text_only = len(content) == 1 and content[0]["type"] == "text"
            message = AIMessage(content=move["text"] if text_only else content, tool_calls=calls,
                                usage_metadata=usage)
            return ChatResult(generations=[ChatGeneration(message=message)])
        done = sum(isinstance(m, ToolMessage) for m in messages)
        step = scripted.next_step(self.scenario, done)
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


@after_model(can_jump_to=["model"])
def check_answer(state: AgentState, runtime: Any) -> dict[str, Any] | None:
    """Send an answer that names no order back to the model, with the reason."""
    last = state["messages"][-1]
    if not isinstance(last, AIMessage) or last.tool_calls or scripted.answer_accepted(last.text):
        return None
    return {"messages": [HumanMessage(scripted.REJECTION)], "jump_to": "model"}


@tool
def cancel_order(order_id: str) -> str:
    """Cancel an order (needs the user's approval)."""
    return scripted.cancel_order(order_id)


def main() -> None:
    scenario = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in scripted.ALL_SCENARIOS else (
        scripted.scenario_from_argv())
    checked = scenario.startswith(("text_", "reasoning_"))
    refusing = scenario.startswith("refused_")
    if refusing:
        agent = create_agent(ScriptedChatModel(scenario=scenario), tools=[lookup_order, search_docs, cancel_order],
                             system_prompt="Answer using the tools.", name="support-agent",
                             middleware=[HumanInTheLoopMiddleware(interrupt_on={"cancel_order": True})],
                             checkpointer=InMemorySaver())
    else:
        agent = create_agent(ScriptedChatModel(scenario=scenario), tools=[lookup_order, search_docs],
                             system_prompt="Answer using the tools.", name="support-agent",
                             middleware=[check_answer] if checked else [])
    config: dict[str, Any] = {"recursion_limit": 60}
    if refusing:
        config["configurable"] = {"thread_id": "support-thread-1"}
    state = agent.invoke({"messages": [("user", "What is the status of my order and the refund policy?")]}, config)
    for _ in range(scripted.MODEL_LOOP_TURNS + 2):
        if not state.get("__interrupt__"):
            break
        requests = state["__interrupt__"][0].value["action_requests"]
        decisions = [{"type": "reject", "message": scripted.REFUSAL} for _ in requests]
        state = agent.invoke(Command(resume={"decisions": decisions}), config)
    print("final answer:", state["messages"][-1].content)


if __name__ == "__main__":
    main()
