"""Strands Agents under the framework matrix:
``python agent.py loop|empty_search|healthy [--openinference]``.

The model is Strands' own ``OpenAIModel`` talking to the scripted model server
(``../scripted_llm.py``, over ``../_common/scripted.py``) on 127.0.0.1. Strands writes its
spans through the global tracer provider, so ``opentelemetry-instrument`` needs no code.
With ``--openinference`` the script adds the one line OpenInference's documentation asks
for: ``StrandsAgentsToOpenInferenceProcessor`` on the tracer provider.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from scripted_llm import ScriptedOpenAI, lookup_order, search_docs


def main(scenario: str, openinference: bool) -> int:
    if openinference:
        from openinference.instrumentation.strands_agents import StrandsAgentsToOpenInferenceProcessor
        from opentelemetry import trace

        trace.get_tracer_provider().add_span_processor(StrandsAgentsToOpenInferenceProcessor())

    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    with ScriptedOpenAI(scenario) as llm:
        model = OpenAIModel(client_args={"base_url": llm.base_url, "api_key": "scripted"},
                            model_id="gpt-4o-mini")
        agent = Agent(model=model, tools=[tool(lookup_order), tool(search_docs)], name="support_agent",
                      callback_handler=None)
        result = agent("Help the customer with their order and the refund policy.")
    print(str(result).strip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "loop", "--openinference" in sys.argv[2:]))
