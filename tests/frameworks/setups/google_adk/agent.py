"""Google ADK under the framework matrix: ``python agent.py loop|empty_search|healthy``.

The model is ADK's own ``Gemini`` model (google-genai underneath) with ``base_url`` set to
the scripted model server (``../scripted_llm.py``, over ``../_common/scripted.py``) on
127.0.0.1. ADK writes its spans
through the global tracer provider, so ``opentelemetry-instrument`` needs no code; the
OpenInference instrumentor loads from its ``opentelemetry_instrumentor`` entry point.
Content settings come from the environment (see ``setups.py``).
"""

from __future__ import annotations

import asyncio
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from scripted_llm import FakeGemini, lookup_order, search_docs


async def _run(base_url: str) -> str:
    from google.adk.agents import LlmAgent
    from google.adk.models.google_llm import Gemini
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    agent = LlmAgent(
        name="support_agent",
        model=Gemini(model="gemini-2.5-flash", base_url=base_url),
        instruction="Help the customer.",
        tools=[lookup_order, search_docs],
    )
    runner = InMemoryRunner(agent=agent, app_name="matrix")
    session = await runner.session_service.create_session(app_name="matrix", user_id="user")
    message = types.Content(role="user", parts=[types.Part(text="Help with my order and the refund policy.")])
    answer = ""
    async for event in runner.run_async(user_id="user", session_id=session.id, new_message=message):
        if event.content and event.content.parts:
            text = "".join(p.text or "" for p in event.content.parts)
            if text.strip():
                answer = text
    return answer


def main(scenario: str) -> int:
    os.environ.setdefault("GOOGLE_API_KEY", "scripted")  # the scripted server ignores it
    os.environ.setdefault("GOOGLE_GENAI_USE_VERTEXAI", "false")
    with FakeGemini(scenario) as llm:
        answer = asyncio.run(_run(llm.base_url))
    print(answer.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "loop"))
