"""CrewAI under the framework matrix: ``python agent.py loop|empty_search|healthy``.

A one-agent, one-task crew on CrewAI's own ``LLM`` (model ``openai/...``, ``base_url``
pointed at the scripted model server ``../scripted_llm.py``, over ``../_common/scripted.py``,
on 127.0.0.1). The
OpenInference instrumentor loads from its ``opentelemetry_instrumentor`` entry point under
``opentelemetry-instrument``: no code. In the ``loop`` scenario CrewAI itself ends the task
at the fifth identical call (otel-progress has flagged the second by then).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from scripted_llm import ScriptedOpenAI, lookup_order, search_docs


def main(scenario: str) -> int:
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool
    from crewai.tools.tool_failure import ToolExecutionFailedError

    with ScriptedOpenAI(scenario) as llm:
        model = LLM(model="openai/gpt-4o-mini", base_url=llm.base_url, api_key="scripted")
        agent = Agent(role="Support agent", goal="Help the customer", backstory="You answer support tickets.",
                      llm=model, tools=[tool("lookup_order")(lookup_order), tool("search_docs")(search_docs)],
                      max_iter=12, verbose=False, allow_delegation=False)
        task = Task(description="Help the customer with their order and the refund policy.",
                    expected_output="A short answer.", agent=agent)
        try:
            result = str(Crew(agents=[agent], tasks=[task], verbose=False).kickoff())
        except ToolExecutionFailedError as exc:
            # CrewAI's own guard: the fifth identical call with an identical result ends the
            # task (crewai.utilities.agent_utils.check_repeated_tool_call). The run is over,
            # as a user would see it: say so and exit normally.
            result = f"CrewAI stopped the run: {exc}"
    print(result.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "loop"))
