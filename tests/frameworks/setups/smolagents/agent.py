"""smolagents under the framework matrix: ``python agent.py loop|empty_search|healthy``.

A ``ToolCallingAgent`` on smolagents' own ``OpenAIModel`` talking to the scripted model
server (``../scripted_llm.py``, over ``../_common/scripted.py``) on 127.0.0.1; the run ends
with the ``final_answer`` tool call. smolagents' ``@tool`` wants every argument described in
the docstring, hence the two wrappers. The OpenInference instrumentor loads from its
``opentelemetry_instrumentor`` entry point under ``opentelemetry-instrument``: no code.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import scripted_llm
from scripted_llm import ScriptedOpenAI


def lookup_order(order_id: str) -> str:
    """Look up an order by its id and return its record as JSON.

    Args:
        order_id: the order id, such as A-17
    """
    return scripted_llm.lookup_order(order_id)


def search_docs(query: str) -> str:
    """Search the help-centre documents; returns the matching passages as JSON.

    Args:
        query: what to search for
    """
    return scripted_llm.search_docs(query)


def main(scenario: str) -> int:
    from smolagents import OpenAIModel, ToolCallingAgent, tool

    with ScriptedOpenAI(scenario) as llm:
        model = OpenAIModel(model_id="gpt-4o-mini", api_base=llm.base_url, api_key="scripted")
        agent = ToolCallingAgent(tools=[tool(lookup_order), tool(search_docs)], model=model, max_steps=12,
                                 name="support_agent", verbosity_level=0)
        answer = agent.run("Help the customer with their order and the refund policy.")
    print(str(answer).strip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "loop"))
