"""An agent instrumented with opentelemetry-util-genai (TelemetryHandler) whose model calls
are inference spans too: run it under ``opentelemetry-instrument`` and whether its inference
spans carry the model's output (``gen_ai.output.messages``) depends only on the
environment's capture settings, as for its tool spans."""

from __future__ import annotations

from opentelemetry.util.genai.handler import TelemetryHandler
from opentelemetry.util.genai.types import InputMessage, OutputMessage, TextPart, ToolCallRequestPart

handler = TelemetryHandler()

with handler.invoke_local_agent(agent_name="support", request_model="scripted"):
    for i in range(3):
        with handler.inference("scripted", request_model="scripted") as inference:
            inference.input_messages = [InputMessage(role="user", parts=[TextPart(content="Where is A-1001?")])]
            inference.output_messages = [OutputMessage(role="assistant", parts=[
                TextPart(content="Let me look it up."),
                ToolCallRequestPart(arguments={"order_id": "A-1001"}, name="lookup_order", id=f"call_{i}")],
                finish_reason="tool_calls")]
            inference.input_tokens = 100
            inference.output_tokens = 10
        with handler.tool("lookup_order") as call:
            call.arguments = {"order_id": "A-1001"}
            call.tool_result = {"order": "A-1001", "state": "shipped"}
print("done")
