"""An agent instrumented with opentelemetry-util-genai (TelemetryHandler), content
capture SPAN_ONLY, under a real SDK with the progress processor. Prints JSON: the
detections and the progress annotations found on the exported spans."""

from __future__ import annotations

import os

os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"

import json
import sys
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util.genai.handler import TelemetryHandler

from otel_progress import Config, ProgressSpanProcessor

exporter = InMemorySpanExporter()
provider = TracerProvider()
detections: list[Any] = []
provider.add_span_processor(ProgressSpanProcessor(SimpleSpanProcessor(exporter), config=Config(),
                                                  on_detection=detections.append))
handler = TelemetryHandler(tracer_provider=provider)


def agent(name: str) -> AbstractContextManager[Any]:
    try:  # util-genai >= 1.0
        return handler.invoke_local_agent(agent_name=name, request_model="gpt-4o")  # type: ignore[no-any-return]
    except TypeError:  # 0.4b0 (the release that supports SDK 1.40)
        cm = handler.invoke_local_agent("openai", request_model="gpt-4o")

        class _Named:
            def __enter__(self) -> Any:
                inv = cm.__enter__()
                inv.agent_name = name
                return inv

            def __exit__(self, *exc: Any) -> Any:
                return cm.__exit__(*exc)

        return _Named()


def search(query: str, hits: list[str]) -> None:
    with handler.tool("search_docs") as inv:
        inv.arguments = {"q": query}
        inv.tool_result = {"results": hits, "total": len(hits)}


mode = sys.argv[1]
with agent(f"docs-{mode}"):
    for i in range(7):
        search(f"refund policy {i}", [] if mode == "loop" else [f"doc-{i}"])

provider.force_flush()
spans = exporter.get_finished_spans()
print(json.dumps({
    "detections": [d.to_dict() for d in detections],
    "spans": [
        {"name": s.name, "span_id": format(s.context.span_id, "016x"),
         "attributes": {k: v for k, v in s.attributes.items() if isinstance(v, (str, int, float, bool))},
         "events": [[e.name, dict(e.attributes or {})] for e in s.events]}
        for s in spans
    ],
}))
