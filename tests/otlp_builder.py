"""Build OTLP/JSON trace exports (the Collector file exporter's format) for tests and
for the example shipped in examples/traces/.

Regenerate the example with ``python -m tests.otlp_builder > examples/traces/agents.jsonl``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from typing import Any

T0 = 1_764_000_000_000_000_000  # a fixed epoch in ns, so output is reproducible
S = 1_000_000_000


def _id(seed: str, size: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[: size * 2]


def value(v: Any) -> dict[str, Any]:
    """An OTLP/JSON AnyValue."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": value(x)} for k, x in v.items()]}}
    if isinstance(v, (list, tuple)):
        return {"arrayValue": {"values": [value(x) for x in v]}}
    return {"stringValue": str(v)}


def attrs(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": value(v)} for k, v in d.items() if v is not None]


class TraceBuilder:
    """Spans of one trace: an optional agent span with tool and chat spans under it."""

    def __init__(self, name: str, agent: str | None = "agent", convention: str = "genai") -> None:
        self.name = name
        self.convention = convention
        self.trace_id = _id("trace:" + name, 16)
        self.spans: list[dict[str, Any]] = []
        self.t = T0
        self.agent_span_id = _id(f"{name}:agent", 8) if agent else ""
        self.agent = agent
        self._n = 0

    def _span(self, name: str, start: int, end: int, attributes: dict[str, Any], parent: str,
              status: dict[str, Any] | None = None, events: list[dict[str, Any]] | None = None) -> str:
        self._n += 1
        span_id = _id(f"{self.name}:{self._n}", 8)
        self.spans.append({
            "traceId": self.trace_id, "spanId": span_id, "parentSpanId": parent, "name": name, "kind": 1,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(end), "attributes": attrs(attributes),
            "events": events or [], "status": status or {},
        })
        return span_id

    def chat(self, tokens: int = 1000) -> None:
        self.t += S
        inp, out = tokens - tokens // 10, tokens // 10
        if self.convention == "openinference":
            a: dict[str, Any] = {"openinference.span.kind": "LLM", "llm.token_count.prompt": inp,
                                 "llm.token_count.completion": out}
        else:
            a = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": inp,
                 "gen_ai.usage.output_tokens": out}
        self._span("chat gpt-4o", self.t, self.t + S // 2, a, self.agent_span_id)

    def _tool_attributes(self, name: str, args: Any, result: Any) -> dict[str, Any]:
        args_text = json.dumps(args) if args is not None else None
        if self.convention == "openinference":
            return {"openinference.span.kind": "TOOL", "tool.name": name, "input.value": args_text,
                    "output.value": result}
        if self.convention == "openllmetry":
            wrapped = json.dumps({"args": [], "kwargs": args}) if args is not None else None
            return {"traceloop.span.kind": "tool", "traceloop.entity.name": name,
                    "traceloop.entity.input": wrapped, "traceloop.entity.output": result}
        return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                "gen_ai.tool.call.arguments": args_text, "gen_ai.tool.call.result": result}

    def tool(self, name: str, args: Any, result: Any = None, *, error: str | None = None,
             gap: float = 2.0, **extra: Any) -> str:
        self.t += int(gap * S)
        a = self._tool_attributes(name, args, result)
        a.update(extra)
        status = events = None
        if error:
            a["error.type"] = error.split(":")[0]
            status = {"code": 2, "message": error}
            events = [{"name": "exception", "timeUnixNano": str(self.t + S // 4),
                       "attributes": attrs({"exception.type": a["error.type"], "exception.message": error})}]
        return self._span(f"execute_tool {name}", self.t, self.t + S // 2, a, self.agent_span_id, status, events)

    def request(self) -> dict[str, Any]:
        spans = list(self.spans)
        if self.agent:
            if self.convention == "openinference":
                a: dict[str, Any] = {"openinference.span.kind": "AGENT", "agent.name": self.agent}
            elif self.convention == "openllmetry":
                a = {"traceloop.span.kind": "agent", "traceloop.entity.name": self.agent}
            else:
                a = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": self.agent,
                     "gen_ai.provider.name": "openai"}
            spans.append({
                "traceId": self.trace_id, "spanId": self.agent_span_id, "parentSpanId": "",
                "name": f"invoke_agent {self.agent}", "kind": 1, "startTimeUnixNano": str(T0),
                "endTimeUnixNano": str(self.t + S), "status": {}, "attributes": attrs(a),
            })
        return {"resourceSpans": [{"resource": {"attributes": attrs({"service.name": "example-agents"})},
                                   "scopeSpans": [{"scope": {"name": "example"}, "spans": spans}]}]}


def example_traces() -> list[TraceBuilder]:
    """The traces of the shipped example: three stuck agents and two healthy ones."""
    out = []
    docs = TraceBuilder("docs-search", "docs-agent")
    for q in ("refund policy", "refund policy annual plans", "annual plan refund rules",
              "what is the refund policy for annual subscriptions"):
        docs.chat(9000)
        docs.tool("search_docs", {"q": q}, "0 results")
    out.append(docs)

    support = TraceBuilder("support-alternation", "support-agent")
    for _ in range(3):
        support.chat(4000)
        support.tool("get_order", {"id": 123}, '{"status": "shipped"}')
        support.chat(4000)
        support.tool("get_shipment", {"id": 123}, '{"eta": "Friday"}')
    out.append(support)

    fixer = TraceBuilder("code-fix-errors", "fixer-agent")
    for i in range(6):
        fixer.chat(6000)
        fixer.tool("fetch_issue", {"id": 4000 + i}, error=f"HTTPError: 404 Not Found: issue {4000 + i}")
    out.append(fixer)

    deploy = TraceBuilder("deploy-healthy", "deploy-agent")
    for status in ("queued", "running", "running", "running", "success"):
        deploy.chat(2000)
        deploy.tool("get_build_status", {"build_id": "b_88231"}, json.dumps({"status": status}), gap=30)
    deploy.chat(2000)
    deploy.tool("merge_pr", {"pr": 88}, "merged")
    out.append(deploy)

    reader = TraceBuilder("reader-healthy", "reader-agent")
    for i in range(8):
        reader.chat(3000)
        reader.tool("read_file", {"path": f"src/mod_{i}.py"}, f"# module {i}")
    out.append(reader)
    return out


def write_jsonl(traces: Iterable[TraceBuilder], out: Any) -> None:
    for trace in traces:
        out.write(json.dumps(trace.request(), separators=(",", ":")) + "\n")


if __name__ == "__main__":
    write_jsonl(example_traces(), sys.stdout)
