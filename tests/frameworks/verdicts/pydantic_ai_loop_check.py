"""A real Pydantic AI agent (pydantic-ai-slim from the matrix's virtualenv, ``FunctionModel``
playing a loop: the same ``search_docs`` call with the same empty result, again and again)
with a loop check of the application's that writes its verdict the way Pydantic AI
Harness's ``LoopDetection`` does: a ``loop_detection.detected`` span event on the current
span (``trace.get_current_span().add_event``), ``error_cycle`` from ``after_tool_execute``
at the third identical result, ``exact_repetition`` from ``after_model_request`` at the
fifth identical call. (The harness's capability is in its repository only, in no PyPI
release up to 0.62.0: this stand-in writes the same event with the same attributes from the
same hooks.) otel-progress's processor runs on the SDK provider; prints one JSON object:
our detections and where the verdicts landed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent
from pydantic_ai.capabilities.abstract import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from otel_progress import Config, ProgressSpanProcessor

CALLS = 8


@dataclass
class LoopCheck(AbstractCapability[Any]):
    """Counts identical calls and results; on a loop, a span event on the current span."""

    calls: dict[str, int] = field(default_factory=dict)
    results: dict[str, int] = field(default_factory=dict)

    async def after_model_request(self, ctx: Any, *, request_context: Any, response: ModelResponse) -> ModelResponse:
        for part in response.parts:
            if isinstance(part, ToolCallPart):
                key = f"{part.tool_name}({json.dumps(part.args_as_dict(), sort_keys=True)})"
                self.calls[key] = self.calls.get(key, 0) + 1
                if self.calls[key] == 5:
                    _verdict("exact_repetition", part.tool_name, 5)
        return response

    async def after_tool_execute(self, ctx: Any, *, call: ToolCallPart, tool_def: Any, args: dict[str, Any],
                                 result: Any) -> Any:
        key = f"{call.tool_name}({json.dumps(args, sort_keys=True)})={result!r}"
        self.results[key] = self.results.get(key, 0) + 1
        if self.results[key] == 3:
            _verdict("error_cycle", call.tool_name, 3)
        return result


def _verdict(tier: str, tool: str, count: int) -> None:
    trace.get_current_span().add_event("loop_detection.detected", {
        "loop.tier": tier, "loop.tool_name": tool, "loop.count": count, "loop.window": count})


def main() -> None:
    exporter = InMemorySpanExporter()
    detections: list[Any] = []
    provider = TracerProvider()
    provider.add_span_processor(ProgressSpanProcessor(SimpleSpanProcessor(exporter), config=Config(),
                                                      on_detection=detections.append))
    trace.set_tracer_provider(provider)
    Agent.instrument_all()

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts)
        if done >= CALLS:
            return ModelResponse(parts=[TextPart("No passage on refunds.")])
        return ModelResponse(parts=[ToolCallPart("search_docs", {"query": "refund policy"}, tool_call_id=f"c{done}")])

    agent = Agent(FunctionModel(model), name="support-agent", capabilities=[LoopCheck()])

    @agent.tool_plain
    def search_docs(query: str) -> str:
        """Search the help-centre documents."""
        return json.dumps({"results": [], "total": 0})

    agent.run_sync("What is the refund policy?")
    provider.force_flush()
    spans = exporter.get_finished_spans()
    verdicts = [(s.name, dict(e.attributes or {}).get("loop.tier")) for s in spans for e in s.events
                if e.name == "loop_detection.detected"]
    print(json.dumps({
        "detections": [[d.reason.value, d.turn, d.figures.get("corroborated_by"), d.figures.get("corroborating_kind")]
                       for d in detections],
        "verdicts": verdicts,
        "tool_spans": sum(1 for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "execute_tool"),
    }))


if __name__ == "__main__":
    main()
