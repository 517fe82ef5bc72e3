"""Reading tool calls, agents and token usage from spans of every convention.

Adapters convert their span objects (an SDK ``ReadableSpan``, an OTLP protobuf span, an
OTLP/JSON span) into a :class:`SpanRecord`; everything after that is shared:
:func:`classify` says what a span is, :func:`read_tool_call` builds the engine's
:class:`~otel_progress.model.ToolCall`, :func:`read_tokens` reads model token usage, and
:class:`Lineage` resolves which agent run and plan node a span belongs to.

Conventions read (see the README's input table): OpenTelemetry GenAI
(``gen_ai.operation.name=execute_tool``), OpenInference (``openinference.span.kind=TOOL``),
OpenLLMetry (``traceloop.span.kind=tool``) and MCP (``mcp.method.name=tools/call``).
"""

from __future__ import annotations

import enum
import json
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .model import NOT_CAPTURED, ToolCall

__all__ = [
    "Lineage",
    "SpanKind",
    "SpanRecord",
    "agent_name",
    "classify",
    "read_tokens",
    "read_tool_call",
]


class SpanKind(enum.Enum):
    """What a span is, for the engine."""

    TOOL = "tool"
    AGENT = "agent"
    MODEL = "model"
    OTHER = "other"


@dataclass(slots=True)
class SpanRecord:
    """A convention-neutral view of one span. Ids are lower-case hex strings."""

    trace_id: str
    span_id: str
    parent_id: str = ""
    name: str = ""
    start_ns: int = 0
    end_ns: int = 0
    attributes: Mapping[str, Any] = field(default_factory=dict)
    error: bool = False
    status_message: str = ""
    events: Sequence[tuple[str, Mapping[str, Any]]] = ()


_MODEL_OPS = frozenset({"chat", "generate_content", "text_completion", "embeddings"})
_TOOL_OP = "execute_tool"
_AGENT_OPS = frozenset({"invoke_agent"})


def _str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def classify(span: SpanRecord) -> SpanKind:
    """Tool call, agent invocation, model call, or anything else."""
    a = span.attributes
    op = a.get("gen_ai.operation.name")
    if op == _TOOL_OP:
        return SpanKind.TOOL
    if op in _AGENT_OPS:
        return SpanKind.AGENT
    oi = a.get("openinference.span.kind")
    if isinstance(oi, str):
        oi = oi.upper()
        if oi == "TOOL":
            return SpanKind.TOOL
        if oi == "AGENT":
            return SpanKind.AGENT
        if oi == "LLM":
            return SpanKind.MODEL
    tl = a.get("traceloop.span.kind")
    if tl == "tool":
        return SpanKind.TOOL
    if tl == "agent":
        return SpanKind.AGENT
    if a.get("mcp.method.name") == "tools/call":
        return SpanKind.TOOL
    if op in _MODEL_OPS or "gen_ai.usage.input_tokens" in a or "llm.token_count.prompt" in a:
        return SpanKind.MODEL
    return SpanKind.OTHER


def _first(a: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        value = a.get(key)
        if value is not None:
            return value
    return NOT_CAPTURED


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _ids(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")] if value.strip() else []
        return tuple(p for p in parts if p)
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    return (str(value),)


def _json_text(value: Any) -> Any:
    """Decode a value that is a JSON-encoded string (``'"0 results"'``) to its text."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        if isinstance(decoded, str):
            return decoded
    return value


def _tool_name(span: SpanRecord) -> str:
    a = span.attributes
    name = _first(a, "gen_ai.tool.name", "tool.name", "traceloop.entity.name")
    if name is not NOT_CAPTURED:
        return _str(name) or "unknown"
    n = span.name
    for prefix in ("execute_tool ", "tools/call "):
        if n.startswith(prefix):
            return n[len(prefix):]
    if n.endswith(".tool"):
        return n[: -len(".tool")]
    return n or "unknown"


def read_tool_call(
    span: SpanRecord,
    *,
    run_id: str = "",
    agent: str | None = None,
    node: str | None = None,
) -> ToolCall:
    """Build the engine's view of a tool-call span. Never raises on odd attribute types."""
    a = span.attributes
    arguments = _first(a, "gen_ai.tool.call.arguments", "input.value", "traceloop.entity.input")
    result = _first(a, "gen_ai.tool.call.result", "output.value")
    if result is NOT_CAPTURED:
        # OpenLLMetry stores json.dumps(output): a text result arrives as a JSON string.
        result = _json_text(_first(a, "traceloop.entity.output"))
    error_type = _str(a.get("error.type"))
    error_message = span.status_message or None
    for name, attrs in span.events:
        if name == "exception":
            error_type = error_type or _str(attrs.get("exception.type"))
            error_message = error_message or _str(attrs.get("exception.message"))
    error = bool(span.error or error_type)
    explicit_node = _str(a.get("progress.plan.node"))
    return ToolCall(
        name=_tool_name(span),
        arguments=arguments,
        result=result,
        error=error,
        error_type=error_type,
        error_message=error_message,
        start_ns=int(span.start_ns or 0),
        end_ns=int(span.end_ns or span.start_ns or 0),
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_id=span.parent_id,
        run_id=run_id,
        agent=agent or _str(a.get("gen_ai.agent.name")) or _str(a.get("agent.name")),
        node=explicit_node or node,
        state=_str(a.get("progress.state")),
        plan_step=_str(a.get("progress.plan.step")),
        goal=_str(a.get("progress.goal.id")),
        goal_distance=_number(a.get("progress.goal.distance")),
        measure=_number(a.get("progress.measure")),
        evidence=_ids(a.get("progress.evidence")),
        obligations=_ids(a.get("progress.obligations")),
        blocked_on=_str(a.get("progress.blocked_on")),
    )


def read_tokens(span: SpanRecord) -> int:
    """Tokens a model-call span consumed (input + output), 0 if it says nothing."""
    a = span.attributes
    total = 0.0
    found = False
    for pair in (
        ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"),
        ("gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"),
        ("llm.token_count.prompt", "llm.token_count.completion"),
    ):
        values = [_number(a.get(k)) for k in pair]
        if any(v is not None for v in values):
            total = sum(v for v in values if v is not None and v > 0)
            found = True
            break
    if not found:
        for key in ("llm.token_count.total", "gen_ai.usage.total_tokens"):
            v = _number(a.get(key))
            if v is not None and v > 0:
                return int(v)
    return int(total)


def agent_name(span: SpanRecord) -> str | None:
    """The agent's name (or id) from an agent span."""
    a = span.attributes
    for key in ("gen_ai.agent.name", "agent.name", "gen_ai.agent.id", "traceloop.entity.name"):
        value = _str(a.get(key))
        if value:
            return value
    name = span.name
    if name.startswith("invoke_agent "):
        return name[len("invoke_agent "):]
    return name or None


#: A registered span: ``(parent_id, kind, name, agent)`` (a plain tuple: cheaper to build,
#: read and keep than an object per span).
_Entry = tuple[str, SpanKind, str, "str | None"]


class Lineage:
    """Which run (agent invocation) and plan node a span belongs to.

    Spans are registered as they become known (at start in-process, on arrival in the
    service, all at once in ``scan``). The table is bounded: the least recently
    registered spans are forgotten first.

    A span's run is its nearest ``invoke_agent`` ancestor (``""``: the whole trace); its
    derived node is the nearest ancestor below that agent that is neither a tool nor an
    agent. A tool span with a tool ancestor is nested (an MCP span inside an
    ``execute_tool`` span) and must be counted once, as the outer call.
    """

    def __init__(self, max_spans: int = 100_000) -> None:
        self._spans: OrderedDict[str, _Entry] = OrderedDict()
        self._max = max_spans

    def __len__(self) -> int:
        return len(self._spans)

    def add(self, span_id: str, parent_id: str, kind: SpanKind, name: str, agent: str | None = None) -> None:
        """Register a span."""
        if not span_id:
            return
        self._spans[span_id] = (parent_id, kind, name, agent)
        if len(self._spans) > self._max:
            self._spans.popitem(last=False)

    def add_record(self, span: SpanRecord) -> SpanKind:
        """Register a span record; returns its kind."""
        kind = classify(span)
        self.add(span.span_id, span.parent_id, kind, span.name,
                 agent_name(span) if kind is SpanKind.AGENT else None)
        return kind

    def discard(self, span_id: str) -> None:
        """Forget a span."""
        self._spans.pop(span_id, None)

    def kind(self, span_id: str) -> SpanKind | None:
        entry = self._spans.get(span_id)
        return None if entry is None else entry[1]

    def resolve(self, parent_id: str) -> tuple[str, str | None, str | None, bool]:
        """For a span with this parent: ``(run_id, agent, node, nested_in_tool)``."""
        node: str | None = None
        nested = False
        seen = 0
        current = parent_id
        while current and seen < 256:
            entry = self._spans.get(current)
            if entry is None:
                break
            parent_id, kind, name, agent = entry
            if kind is SpanKind.AGENT:
                return current, agent, node, nested
            if kind is SpanKind.TOOL:
                nested = True
            elif node is None:
                node = name
            current = parent_id
            seen += 1
        return "", None, node, nested

    def parent_run(self, agent_span_id: str) -> str:
        """The run an agent span was invoked from: its nearest agent ancestor, or ``""``
        (the trace) for a top-level agent."""
        entry = self._spans.get(agent_span_id)
        if entry is None:
            return ""
        return self.resolve(entry[0])[0]
