"""Agno under the framework matrix: ``python agent.py loop|empty_search|healthy``.

An Agno ``Agent`` on Agno's own ``OpenAIChat`` model talking to the scripted model server
(``../scripted_llm.py``, over ``../_common/scripted.py``) on 127.0.0.1. The OpenInference instrumentor loads from its
``opentelemetry_instrumentor`` entry point under ``opentelemetry-instrument``: no code.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from scripted_llm import ScriptedOpenAI, lookup_order, search_docs


def main(scenario: str) -> int:
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat

    with ScriptedOpenAI(scenario) as llm:
        model = OpenAIChat(id="gpt-4o-mini", base_url=llm.base_url, api_key="scripted")
        agent = Agent(name="support_agent", model=model, tools=[lookup_order, search_docs], telemetry=False)
        response = agent.run("Help the customer with their order and the refund policy.")
    print(str(response.content).strip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "loop"))
