"""smolagents under the framework matrix: ``python agent.py loop|empty_search|healthy``.

A ``ToolCallingAgent`` on smolagents' own ``OpenAIModel`` talking to the scripted model
server (``../scripted_llm.py``) on 127.0.0.1; the run ends with the ``final_answer`` tool
call. The OpenInference instrumentor loads from its ``opentelemetry_instrumentor`` entry
point under ``opentelemetry-instrument``: no code.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from scripted_llm import ScriptedLLM, lookup_order, search_docs


def main(scenario: str) -> int:
    from smolagents import OpenAIModel, ToolCallingAgent, tool

    with ScriptedLLM(scenario) as llm:
        model = OpenAIModel(model_id="gpt-4o-mini", api_base=llm.openai_base_url, api_key="scripted")
        agent = ToolCallingAgent(tools=[tool(lookup_order), tool(search_docs)], model=model, max_steps=12,
                                 name="support_agent", verbosity_level=0)
        answer = agent.run("Help the customer with order A-1001 and the refund policy.")
    print(str(answer).strip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "loop"))
