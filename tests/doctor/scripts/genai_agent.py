"""A looping agent instrumented with opentelemetry-util-genai (TelemetryHandler) on the
global tracer provider: run it under ``opentelemetry-instrument`` (zero code) and the
content of its tool spans depends only on the environment's capture settings."""

from __future__ import annotations

from opentelemetry.util.genai.handler import TelemetryHandler

handler = TelemetryHandler()

with handler.invoke_local_agent(agent_name="support", request_model="scripted"):
    for _ in range(5):
        with handler.tool("lookup_order") as call:
            call.arguments = {"order_id": "A-1001"}
            call.tool_result = {"order": "A-1001", "state": "shipped"}
print("done")
