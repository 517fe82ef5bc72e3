"""OTLP/JSON traces for corpus runs, in each span convention the engine reads.

One trace per run: a root ``invoke_agent`` (or AGENT / agent) span, one model-call span per
turn carrying the turn's token usage, one tool span per call (parallel calls overlap under
the same parent), and a sub-agent span around each sub-agent invocation. Errors are span
status ERROR with the message, ``error.type`` (GenAI) and an ``exception`` event. Runs with
``capture: false`` carry no arguments or results, as with content capture off.

Conventions (see ``shared/research/otel.md`` §1-2):

``genai``          OpenTelemetry GenAI: ``execute_tool {name}``, ``gen_ai.tool.call.arguments`` /
                   ``.result``, ``chat {model}`` with ``gen_ai.usage.*``.
``openinference``  Arize OpenInference: ``openinference.span.kind`` TOOL/LLM/AGENT,
                   ``input.value`` / ``output.value``, ``llm.token_count.*``.
``openllmetry``    Traceloop OpenLLMetry: ``{name}.tool`` spans with ``traceloop.span.kind``,
                   ``traceloop.entity.input`` = JSON ``{"args": [], "kwargs": {...}}`` and
                   ``traceloop.entity.output`` = the JSON encoding of the return value, as
                   the ``@tool`` decorator writes them.

Ids are derived from the run id and convention, so every generation is identical.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_progress.otlp.files import encode_attributes

from .corpus import Call, Run, Step

__all__ = ["CONVENTIONS", "GeneratedTrace", "build_trace", "write_traces"]

CONVENTIONS = ("genai", "openinference", "openllmetry")

_NS = 1_000_000_000
_EPOCH_NS = 1_773_738_000 * _NS  # 2026-03-17T09:00:00Z
_MODEL = "gpt-4.1"
_INTERNAL, _CLIENT = 1, 3
_SCOPES = {
    "genai": "opentelemetry.util.genai",
    "openinference": "openinference.instrumentation",
    "openllmetry": "opentelemetry.instrumentation.traceloop",
}


@dataclass
class GeneratedTrace:
    """One run's trace in one convention, and where each span sits in the run."""

    run_id: str
    convention: str
    trace_id: str
    document: dict[str, Any]
    span_turns: dict[str, int] = field(default_factory=dict)  # span id -> corpus turn

    def turn_of(self, span_id: str) -> int | None:
        return self.span_turns.get(span_id)


def _hex(text: str, size: int) -> str:
    return hashlib.blake2b(text.encode(), digest_size=size).hexdigest()


def _attrs(attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    return encode_attributes({k: v for k, v in attrs.items() if v is not None})


class _Builder:
    def __init__(self, run: Run, convention: str) -> None:
        self.run = run
        self.conv = convention
        self.trace_id = _hex(f"{convention}/{run.id}", 16)
        self.base_ns = _EPOCH_NS + (int(_hex(run.id, 4), 16) % 5000) * 3600 * _NS
        self.spans: list[dict[str, Any]] = []
        self.span_turns: dict[str, int] = {}
        self._n = 0

    def ns(self, seconds: float) -> int:
        return self.base_ns + round(seconds * _NS)

    def new_id(self) -> str:
        self._n += 1
        return _hex(f"{self.conv}/{self.run.id}/{self._n}", 8)

    def span(self, span_id: str, parent: str, name: str, kind: int, start: float, end: float,
             attrs: Mapping[str, Any], error: Call | None = None) -> None:
        span: dict[str, Any] = {
            "traceId": self.trace_id,
            "spanId": span_id,
            "parentSpanId": parent,
            "name": name,
            "kind": kind,
            "startTimeUnixNano": str(self.ns(start)),
            "endTimeUnixNano": str(self.ns(end)),
            "attributes": _attrs(attrs),
            "status": {},
        }
        if not parent:
            del span["parentSpanId"]
        if error is not None and error.error is not None:
            span["status"] = {"code": 2, "message": error.error.message}
            span["events"] = [{
                "timeUnixNano": str(self.ns(end)),
                "name": "exception",
                "attributes": _attrs({
                    "exception.type": error.error.type,
                    "exception.message": error.error.message,
                    "exception.escaped": "False",
                }),
            }]
        self.spans.append(span)

    # -- per-convention attributes ----------------------------------------------------

    def agent_attrs(self, agent: str) -> tuple[str, dict[str, Any]]:
        if self.conv == "genai":
            return f"invoke_agent {agent}", {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": "openai",
                "gen_ai.agent.name": agent,
                "gen_ai.request.model": _MODEL,
                "gen_ai.conversation.id": self.run.id,
            }
        if self.conv == "openinference":
            return agent, {
                "openinference.span.kind": "AGENT",
                "agent.name": agent,
                "session.id": self.run.id,
            }
        return f"{agent}.agent", {
            "traceloop.span.kind": "agent",
            "traceloop.entity.name": agent,
            "traceloop.workflow.name": self.run.category,
            "gen_ai.agent.name": agent,
            "gen_ai.conversation.id": self.run.id,
        }

    def chat_attrs(self, step_input: int, step_output: int, agent: str) -> tuple[str, dict[str, Any]]:
        if self.conv == "genai":
            return f"chat {_MODEL}", {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": _MODEL,
                "gen_ai.response.model": _MODEL,
                "gen_ai.usage.input_tokens": step_input,
                "gen_ai.usage.output_tokens": step_output,
            }
        if self.conv == "openinference":
            return "ChatCompletion", {
                "openinference.span.kind": "LLM",
                "llm.model_name": _MODEL,
                "llm.provider": "openai",
                "llm.system": "openai",
                "llm.token_count.prompt": step_input,
                "llm.token_count.completion": step_output,
                "llm.token_count.total": step_input + step_output,
            }
        return "openai.chat", {
            "llm.request.type": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": _MODEL,
            "gen_ai.response.model": _MODEL,
            "gen_ai.usage.input_tokens": step_input,
            "gen_ai.usage.output_tokens": step_output,
            "llm.usage.total_tokens": step_input + step_output,
            "traceloop.workflow.name": self.run.category,
            "gen_ai.agent.name": agent,
        }

    def tool_attrs(self, call: Call, call_id: str, agent: str) -> tuple[str, dict[str, Any]]:
        capture = self.run.capture
        result = None if call.error is not None else call.result_text
        attrs: dict[str, Any]
        if self.conv == "genai":
            name = f"execute_tool {call.name}"
            attrs = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.name,
                "gen_ai.tool.type": "function",
                "gen_ai.tool.call.id": call_id,
            }
            if capture:
                attrs["gen_ai.tool.call.arguments"] = call.args_text
                attrs["gen_ai.tool.call.result"] = result
            if call.error is not None:
                attrs["error.type"] = call.error.type
        elif self.conv == "openinference":
            name = call.name
            attrs = {
                "openinference.span.kind": "TOOL",
                "tool.name": call.name,
                "tool.id": call_id,
            }
            if capture:
                attrs["input.value"] = call.args_text
                attrs["input.mime_type"] = "application/json"
                if result is not None:
                    attrs["output.value"] = result
                    attrs["output.mime_type"] = "text/plain" if isinstance(call.result, str) else "application/json"
        else:
            name = f"{call.name}.tool"
            attrs = {
                "traceloop.span.kind": "tool",
                "traceloop.entity.name": call.name,
                "traceloop.entity.path": agent,
                "traceloop.workflow.name": self.run.category,
                "gen_ai.tool.name": call.name,
                "gen_ai.agent.name": agent,
            }
            if capture:
                attrs["traceloop.entity.input"] = json.dumps({"args": [], "kwargs": call.args or {}})
                if call.error is None and call.result is not None:
                    attrs["traceloop.entity.output"] = json.dumps(call.result)
        # Facts an agent may publish about its own state (the README's input attributes).
        attrs["progress.state"] = call.state
        attrs["progress.plan.node"] = call.node
        attrs["progress.measure"] = call.measure
        return name, attrs

    # -- the trace --------------------------------------------------------------------

    def build(self) -> GeneratedTrace:
        run = self.run
        root_id = self.new_id()
        invocations = run.invocations()
        steps = list(run.steps)
        end_of_run = run.duration
        last_turn = steps[-1].turn
        if run.conclusion:
            self.chat(root_id, end_of_run + 0.1, steps[-1], run.agent, final=True)
            end_of_run += 0.1 + steps[-1].chat_seconds
        name, attrs = self.agent_attrs(run.agent)
        self.span(root_id, "", name, _INTERNAL, -0.2, end_of_run + 0.1, attrs)
        self.span_turns[root_id] = last_turn
        parents = {0: root_id}
        next_start = {s.turn: s.start for s in steps}
        for inv in invocations[1:]:
            sub_id = self.new_id()
            parents[inv.index] = sub_id
            first, last = inv.steps[0], inv.steps[-1]
            following = next_start.get(last.turn + 1, last.end + 2.0)
            end = min(last.end + 0.4, following - 0.05)
            name, attrs = self.agent_attrs(inv.agent)
            self.span(sub_id, root_id, name, _INTERNAL, first.start - 0.05, end, attrs)
            self.span_turns[sub_id] = last.turn
        for step in steps:
            parent = parents[step.invocation]
            self.chat(parent, step.start, step, step.agent)
            for k, call in enumerate(step.calls):
                tool_id = self.new_id()
                start = step.tools_start + 0.05 * k
                name, attrs = self.tool_attrs(call, "call_" + tool_id[:12], step.agent)
                self.span(tool_id, parent, name, _INTERNAL, start, start + call.duration, attrs,
                          error=call if call.error is not None else None)
                self.span_turns[tool_id] = step.turn
        document = {
            "resourceSpans": [{
                "resource": {"attributes": _attrs({"service.name": run.agent,
                                                   "bench.run.id": run.id})},
                "scopeSpans": [{
                    "scope": {"name": _SCOPES[self.conv]},
                    "spans": sorted(self.spans, key=lambda s: int(s["startTimeUnixNano"])),
                }],
            }],
        }
        return GeneratedTrace(run.id, self.conv, self.trace_id, document, self.span_turns)

    def chat(self, parent: str, start: float, step: Step, agent: str, final: bool = False) -> None:
        input_tokens = step.input_tokens + (step.input_tokens // 10 if final else 0)
        name, attrs = self.chat_attrs(input_tokens, step.output_tokens, agent)
        self.span(self.new_id(), parent, name, _CLIENT, start, start + step.chat_seconds, attrs)


def build_trace(run: Run, convention: str) -> GeneratedTrace:
    """The OTLP/JSON trace of one run in one convention."""
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}; known: {', '.join(CONVENTIONS)}")
    return _Builder(run, convention).build()


def write_traces(runs: Iterable[Run], convention: str, directory: str | Path) -> dict[str, GeneratedTrace]:
    """Write one OTLP/JSON file per run (``<run id>.json``, one line) into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    out: dict[str, GeneratedTrace] = {}
    for run in runs:
        trace = build_trace(run, convention)
        with open(directory / f"{run.id}.json", "w", encoding="utf-8") as fh:
            json.dump(trace.document, fh, separators=(",", ":"), ensure_ascii=False)
            fh.write("\n")
        out[run.id] = trace
    return out
