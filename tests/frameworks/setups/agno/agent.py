"""Agno under the framework matrix: ``python agent.py loop|empty_search|healthy``.

An Agno ``Agent`` on Agno's own ``OpenAIChat`` model talking to the scripted model server
(``../scripted_llm.py``) on 127.0.0.1. The OpenInference instrumentor loads from its
``opentelemetry_instrumentor`` entry point under ``opentelemetry-instrument``: no code.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from scripted_llm import ScriptedLLM, lookup_order, search_docs


def main(scenario: str) -> int:
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat

    with ScriptedLLM(scenario) as llm:
        model = OpenAIChat(id="gpt-4o-mini", base_url=llm.openai_base_url, api_key="scripted")
        agent = Agent(name="support_agent", model=model, tools=[lookup_order, search_docs], telemetry=False)
        response = agent.run("Help the customer with order A-1001 and the refund policy.")
    print(str(response.content).strip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "loop"))
