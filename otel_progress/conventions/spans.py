"""Reading tool calls, agents and token usage from spans of every convention: the stable
facade over :mod:`otel_progress.conventions`.

Adapters convert their span objects (an SDK ``ReadableSpan``, an OTLP protobuf span, an
OTLP/JSON span) into a :class:`SpanRecord`; everything after that is shared:
:func:`classify` says what a span is, :func:`read_tool_call` builds the engine's
:class:`~otel_progress.model.ToolCall`, :func:`read_tokens` reads model token usage
(:func:`read_input_tokens` its input part),
:func:`agent_name` names an agent span, :func:`run_group` finds the client run of a tool
call that has no agent span, :class:`Lineage` resolves which agent run and plan node a
span belongs to, and :class:`CompactionMarks` finds the compactions of a run in its model
spans.

The conventions themselves (OpenTelemetry GenAI, OpenInference, OpenLLMetry, MCP, Pydantic
AI, Strands, Google ADK, LlamaIndex through OpenLLMetry) are one module each in
:mod:`otel_progress.conventions`; docs/conventions.md ("Inputs it reads") lists what each reads.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from itertools import islice
from typing import Any

from ..model import NOT_CAPTURED, Compaction, ToolCall
from . import (
    COMPACTED_CONTEXT,
    COMPACTION,
    MARKER_KEYS,
    MARKER_NAME_PREFIXES,
    SpanKind,
    SpanRecord,
    agent_name,
    classify,
    group_key,
    is_candidate,
    own_trace,
    read_compaction,
    read_input_tokens,
    read_tokens,
    read_tool,
    tool_call_id,
)
from .base import as_number, as_text

__all__ = [
    "MARKER_KEYS",
    "MARKER_NAME_PREFIXES",
    "CompactionMarks",
    "Lineage",
    "SpanKind",
    "SpanRecord",
    "agent_name",
    "classify",
    "is_candidate",
    "read_input_tokens",
    "read_tokens",
    "read_tool_call",
    "run_group",
]


def _str(value: Any) -> str | None:
    """Text of a scalar attribute (numbers as their text); ``None`` for lists and maps."""
    if value is None:
        return None
    text = as_text(value)
    if text is not None:
        return text
    if isinstance(value, (int, float)):
        return _text_of(value)
    return None


def _text_of(value: Any) -> str:
    try:
        return str(value)
    except ValueError:  # an integer past the interpreter's digit limit
        return "<number>"


def _ids(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")] if value.strip() else []
        return tuple(p for p in parts if p)
    if isinstance(value, (list, tuple)):
        return tuple(_text_of(v) for v in value)
    return (_text_of(value),)


def _fallback_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        return "unknown"
    for prefix in ("execute_tool ", "tools/call "):
        if name.startswith(prefix):
            return name[len(prefix):] or "unknown"
    if name.endswith(".tool") and len(name) > 5:
        return name[: -len(".tool")]
    return name


def read_tool_call(
    span: SpanRecord,
    *,
    run_id: str = "",
    agent: str | None = None,
    node: str | None = None,
    trace_key: str | None = None,
) -> ToolCall:
    """Build the engine's view of a tool-call span. Never raises on odd attribute types.

    ``trace_key``: the engine's trace key when it is not the span's trace id (a
    :func:`run_group` key)."""
    a = span.attributes
    content = read_tool(span)
    error_type = _str(a.get("error.type")) or content.error_type
    error_message = span.status_message or content.error_message or None
    for event in span.events or ():
        try:
            name, attrs = event
        except (TypeError, ValueError):
            continue
        if name == "exception" and hasattr(attrs, "get"):
            error_type = error_type or _str(attrs.get("exception.type"))
            error_message = error_message or _str(attrs.get("exception.message"))
    error = bool(span.error or error_type)
    progress = _NO_PROGRESS if _PROGRESS_KEYS.isdisjoint(a) else _progress(a)
    return ToolCall(
        name=content.name or _fallback_name(span.name),
        arguments=NOT_CAPTURED if content.arguments is None else content.arguments,
        result=NOT_CAPTURED if content.result is None else content.result,
        error=error,
        error_type=error_type,
        error_message=error_message if isinstance(error_message, str) else None,
        start_ns=_ns(span.start_ns),
        end_ns=_ns(span.end_ns) or _ns(span.start_ns),
        trace_id=trace_key or span.trace_id,
        span_id=span.span_id,
        parent_id=span.parent_id,
        run_id=run_id,
        agent=agent or _str(a.get("gen_ai.agent.name")) or _str(a.get("agent.name")),
        node=progress["node"] or node,
        state=progress["state"],
        plan_step=progress["plan_step"],
        goal=progress["goal"],
        goal_distance=progress["goal_distance"],
        measure=progress["measure"],
        evidence=progress["evidence"],
        obligations=progress["obligations"],
        blocked_on=progress["blocked_on"],
        result_truncated=content.truncated,
        executed=content.executed,
        call_id=tool_call_id(span),
    )


#: The ``progress.*`` attributes a tool call may carry (docs/engine.md); a span with none of
#: them (most) skips reading them one by one.
_PROGRESS_KEYS = frozenset({"progress.plan.node", "progress.state", "progress.plan.step", "progress.goal.id",
                            "progress.goal.distance", "progress.measure", "progress.evidence",
                            "progress.obligations", "progress.blocked_on"})
_NO_PROGRESS: dict[str, Any] = dict.fromkeys(("node", "state", "plan_step", "goal", "goal_distance", "measure",
                                              "evidence", "obligations", "blocked_on"))


def _progress(a: Mapping[str, Any]) -> dict[str, Any]:
    """The ``progress.*`` fields of a tool call, as its attributes give them."""
    return {
        "node": _str(a.get("progress.plan.node")),
        "state": _str(a.get("progress.state")),
        "plan_step": _str(a.get("progress.plan.step")),
        "goal": _str(a.get("progress.goal.id")),
        "goal_distance": as_number(a.get("progress.goal.distance")),
        "measure": as_number(a.get("progress.measure")),
        "evidence": _ids(a.get("progress.evidence")),
        "obligations": _ids(a.get("progress.obligations")),
        "blocked_on": _str(a.get("progress.blocked_on")),
    }


def _ns(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0


def run_group(span: SpanRecord) -> str | None:
    """For a tool span that is the root of its trace (no agent span, no parent): the
    engine trace key of the client run it belongs to (its session, conversation, service
    instance or process; see :mod:`otel_progress.conventions.grouping`), or ``None``.
    Tool spans of a convention that gives every call a trace of its own (under a
    per-call parent) are grouped too (:func:`~otel_progress.conventions.grouping.own_trace`)."""
    if span.parent_id and not own_trace(span):
        return None
    try:
        return group_key(span)
    except Exception:  # pragma: no cover - group_key is total
        return None


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

    def trimmed(self, recent: int) -> Lineage:
        """A copy that keeps what spans still to come most likely need: the ``recent``
        spans registered last and their ancestors (agents, plan nodes), ancestors first.
        Costs about ``recent`` steps, however many spans the table holds."""
        spans = self._spans
        order: list[str] = []
        keep: set[str] = set()
        for sid in islice(reversed(spans), recent):
            current, hops = sid, 0
            while current and current not in keep and hops < 256:
                entry = spans.get(current)
                if entry is None:
                    break
                keep.add(current)
                order.append(current)
                current = entry[0]
                hops += 1
        out = Lineage(self._max)
        out._spans = OrderedDict((sid, spans[sid]) for sid in reversed(order))
        return out

    def discard(self, span_id: str) -> None:
        """Forget a span."""
        self._spans.pop(span_id, None)

    def kind(self, span_id: str) -> SpanKind | None:
        entry = self._spans.get(span_id)
        return None if entry is None else entry[1]

    def resolve(self, parent_id: str) -> tuple[str, str | None, str | None, bool]:
        """For a span with this parent: ``(run_id, agent, node, nested_in_tool)``."""
        return self.walk(parent_id)[:4]  # type: ignore[return-value]

    def walk(self, parent_id: str) -> tuple[str, str | None, str | None, bool, str]:
        """:meth:`resolve`, and the first ancestor id the table does not know (``""``: the
        walk ended at a root, or at an agent)."""
        node: str | None = None
        nested = False
        seen = 0
        current = parent_id
        while current and seen < 256:
            entry = self._spans.get(current)
            if entry is None:
                return "", None, node, nested, current
            parent_id, kind, name, agent = entry
            if kind is SpanKind.AGENT:
                return current, agent, node, nested, ""
            if kind is SpanKind.TOOL:
                nested = True
            elif node is None:
                node = name
            current = parent_id
            seen += 1
        return "", None, node, nested, ""

    def entry(self, span_id: str) -> tuple[str, SpanKind, str, str | None] | None:
        """A registered span: ``(parent_id, kind, name, agent)``, or None."""
        return self._spans.get(span_id)

    def __contains__(self, span_id: object) -> bool:
        return span_id in self._spans

    def parent_run(self, agent_span_id: str) -> str:
        """The run an agent span was invoked from: its nearest agent ancestor, or ``""``
        (the trace) for a top-level agent."""
        entry = self._spans.get(agent_span_id)
        if entry is None:
            return ""
        return self.resolve(entry[0])[0]


_MAX_MARKED_RUNS = 4096


class CompactionMarks:
    """The compactions of runs, from their model spans in the order they start: a span
    that is a compaction (Claude Code's summarising ``llm_request``) is one; so is the first
    span working on a compacted context (``gen_ai.conversation.compacted``) after a model
    span of the run that was not (an instrumentation that marks every later span gives one
    boundary; one that marks the first span after each compaction gives one each). Bounded:
    the latest 4,096 runs are remembered (a forgotten run's next marked span is no boundary,
    which can only miss one)."""

    __slots__ = ("_compacted",)

    def __init__(self) -> None:
        self._compacted: OrderedDict[tuple[str, str], bool] = OrderedDict()  # run -> its last model span's mark

    def at(self, span: SpanRecord, trace_id: str, run_id: str, agent: str | None = None) -> Compaction | None:
        """The compaction a model span of the run marks (at its start), or ``None``."""
        mark = read_compaction(span)
        key = (trace_id, run_id)
        previous = self._compacted.pop(key, None)
        self._compacted[key] = mark == COMPACTED_CONTEXT
        if len(self._compacted) > _MAX_MARKED_RUNS:
            self._compacted.popitem(last=False)
        if mark != COMPACTION and not (mark == COMPACTED_CONTEXT and previous is False):
            return None
        name = span.name if isinstance(span.name, str) else ""
        return Compaction(trace_id=trace_id, run_id=run_id, time_ns=_ns(span.start_ns), span_id=span.span_id,
                          source=name if mark == COMPACTION else "gen_ai.conversation.compacted", agent=agent)
