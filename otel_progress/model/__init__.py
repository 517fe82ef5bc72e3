"""The engine's data model: what goes in (tool calls) and what comes out (detections)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .limits import attribute_value

__all__ = [
    "COMPACTION_AUTO",
    "COMPACTION_MANUAL",
    "EVENT_LIVELOCK",
    "EVENT_NO_PROGRESS",
    "NOT_CAPTURED",
    "Compaction",
    "Detection",
    "Finding",
    "Level",
    "ModelOutput",
    "Reason",
    "Scope",
    "ToolCall",
    "ToolRequest",
]

EVENT_NO_PROGRESS = "no_progress"
EVENT_LIVELOCK = "livelock"


class _NotCaptured:
    """Marker for content that was not captured (content capture off)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_CAPTURED"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "NOT_CAPTURED"  # (the one marker, also in run state read back: it is compared with ``is``)


#: ``ToolCall.arguments`` / ``ToolCall.result`` when the span carried no content.
NOT_CAPTURED: Any = _NotCaptured()


class Reason(enum.StrEnum):
    """Why a detection fired. The value is the exported ``progress.reason``."""

    REPEAT_CYCLE = "repeat_cycle"
    FREQUENCY = "frequency"
    BARREN = "barren"
    STATE_REVISIT = "state_revisit"
    WAIT_TIMEOUT = "wait_timeout"
    POLL_AFTER_TERMINAL = "poll_after_terminal"
    UNKNOWN_WAIT_STATE = "unknown_wait_state"
    SIGNATURE_REPEAT = "signature_repeat"
    STALLED_MEASURE = "stalled_measure"
    ERROR_RECURRENCE = "error_recurrence"
    SAME_ANSWER = "same_answer"
    COMPACTION_LIVELOCK = "compaction_livelock"
    #: the model's text (or reasoning) repeats what it already said, with nothing new between
    TEXT_REPEAT = "text_repeat"
    #: the same tool request keeps going unexecuted (unknown tool, refused, arguments that
    #: did not parse, or never answered by any tool call)
    UNEXECUTED_REPEAT = "unexecuted_repeat"

    def __str__(self) -> str:
        return self.value

    @property
    def event(self) -> str:
        """The span event name this reason is reported under."""
        return EVENT_LIVELOCK if self in _LIVELOCKS else EVENT_NO_PROGRESS


_LIVELOCKS = frozenset({Reason.SIGNATURE_REPEAT, Reason.COMPACTION_LIVELOCK})


class Level(enum.IntEnum):
    """The escalation ladder (seed 004): what a harness should do about a detection."""

    NUDGE = 1
    RESTART = 2
    PARK = 3

    @property
    def action(self) -> str:
        """The lower-case name of the action, e.g. ``"nudge"``."""
        return self.name.lower()


class Scope(enum.StrEnum):
    """Whether a detection concerns one agent's run or the whole trace across agents."""

    AGENT = "agent"
    RUN = "run"
    #: the runs of one conversation (``gen_ai.conversation.id``) across traces
    CONVERSATION = "conversation"

    def __str__(self) -> str:
        return self.value


@dataclass(slots=True)
class ToolCall:
    """One tool call of an agent run, as read from a span (or given directly).

    ``arguments`` and ``result`` may be a map, a list, a scalar or a JSON string; they are
    :data:`NOT_CAPTURED` when the span carried no content. Times are Unix nanoseconds.
    The ``progress_*`` fields are optional facts an agent or tool may publish as span
    attributes (docs/conventions.md, "Attributes an agent may publish").

    ``evidence_level`` says what the source let the engine know (log input from coding
    agents, see docs/coding-agents.md): ``"full"`` (the default: arguments and the whole
    result), ``"arguments"`` (the result is only a size or a truncated preview: equal
    results are never inferred from it, a differing one still counts as new) or
    ``"names"`` (arguments and result are ignored: only error recurrence applies).
    ``result_truncated`` marks a result that is a truncated preview at any level.
    ``executed`` is ``False`` for a call that never ran (denied or still awaiting approval
    before execution, ``gen_ai.tool.call.decision``): the engine ignores it, so it is
    neither a repeat nor a failure of the tool.
    """

    name: str
    arguments: Any = NOT_CAPTURED
    result: Any = NOT_CAPTURED
    error: bool = False
    error_type: str | None = None
    error_message: str | None = None
    start_ns: int = 0
    end_ns: int = 0
    trace_id: str = ""
    span_id: str = ""
    parent_id: str = ""
    run_id: str = ""
    agent: str | None = None
    node: str | None = None
    state: str | None = None
    plan_step: str | None = None
    goal: str | None = None
    goal_distance: float | None = None
    measure: float | None = None
    evidence: tuple[str, ...] | None = None
    obligations: tuple[str, ...] | None = None
    blocked_on: str | None = None
    tokens: int = 0
    evidence_level: str = "full"
    result_truncated: bool = False
    executed: bool = True
    #: the tool-call id the model gave the call (``gen_ai.tool.call.id``), when known: it
    #: matches the call to the request in a model output (:class:`ToolRequest`)
    call_id: str | None = None

    @property
    def captured(self) -> bool:
        """Whether the call carried arguments or a result to compare."""
        return self.arguments is not NOT_CAPTURED or self.result is not NOT_CAPTURED


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """A tool call the model asked for in its output (it may never run: an unknown tool,
    a call the harness or the user refused, arguments that did not parse)."""

    name: str
    arguments: Any = NOT_CAPTURED
    call_id: str | None = None


@dataclass(slots=True)
class ModelOutput:
    """What one model call answered, as read from an inference span (``chat ...``, an AI
    SDK step) or a coding agent's response record: the model's side of a step.

    ``text`` and ``reasoning`` are the output's text and reasoning parts, joined (``None``:
    not captured, or none); ``requests`` the tool calls it asked for; ``prompt`` the latest
    user message of its input (``None``: not captured): a new one is a new request from the
    user, so an answer repeated to a new question is no loop. Times are Unix nanoseconds.
    """

    trace_id: str = ""
    run_id: str = ""
    span_id: str = ""
    start_ns: int = 0
    end_ns: int = 0
    agent: str | None = None
    text: str | None = None
    reasoning: str | None = None
    requests: tuple[ToolRequest, ...] = ()
    prompt: str | None = None

    @property
    def captured(self) -> bool:
        """Whether the output carried any content to compare."""
        return self.text is not None or self.reasoning is not None or bool(self.requests)


#: ``Compaction.trigger``: the agent compacted on its own (its context was nearly full).
COMPACTION_AUTO = "auto"
#: ``Compaction.trigger``: a user asked for it (``/compact``, ``/compress``).
COMPACTION_MANUAL = "manual"


@dataclass(slots=True)
class Compaction:
    """One compaction of an agent run's context: the agent replaced its conversation so far
    by a summary (``claude_code.compaction``, ``gemini_cli.chat_compression``, the first
    model span marked ``gen_ai.conversation.compacted``). Only a compaction that took place
    is one: a failed attempt left the context as it was.

    Attributes:
        trace_id, run_id: the run, as for :class:`ToolCall`.
        time_ns: when it happened (Unix ns): calls that started before it are before it.
        trigger: :data:`COMPACTION_AUTO`, :data:`COMPACTION_MANUAL`, or ``None`` (unknown).
        tokens_before, tokens_after: the context's size in tokens before and after, when
            the agent says.
        span_id: the id of the record or span that reported it (a redelivered one is
            counted once; a detection on it is reported there).
        source: what reported it (``claude_code.compaction``, ...), for documentation.
        agent: the agent's name, when known.
    """

    trace_id: str = ""
    run_id: str = ""
    time_ns: int = 0
    trigger: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    span_id: str = ""
    source: str = ""
    agent: str | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    """What a signal reports for a step: a reason and the figures behind it."""

    reason: Reason
    figures: Mapping[str, Any] = field(default_factory=dict)
    observed: str = ""
    scope: Scope = Scope.AGENT
    #: what repeated (a step key, an answer, an error signature), when the signal knows it:
    #: the escalation ladder climbs only while the same loop goes on (None: the reason alone)
    loop: int | None = None


@dataclass(frozen=True, slots=True)
class Detection:
    """A detection: the run stopped making progress, at a turn, on a span.

    Attributes:
        reason: why it fired.
        turn: 1-based step index in the run (a batch of parallel calls is one step).
        level: the escalation level (1 nudge, 2 restart, 3 park).
        scope: ``agent`` (one run), ``run`` (the whole trace, across agents) or
            ``conversation`` (the runs of one conversation, across traces).
        trace_id, span_id: hex ids of the span the detection belongs on.
        run_id: the run's key (the ``invoke_agent`` span id, or ``""`` for the trace).
        agent: the agent's name or id, when known.
        tool: the tool of the step that fired (names of a parallel batch joined by ``+``).
        figures: the reason's figures (``period``, ``barren_steps``, ``visits``, ...).
        nudge: a ready message for the agent: what was observed, and the request to
            state a falsifiable hypothesis.
        handoff: a note for a fresh restart listing what was tried, from the fingerprints.
        tokens: tokens the run had consumed when the detection fired.
    """

    reason: Reason
    turn: int
    level: Level
    scope: Scope
    trace_id: str
    span_id: str
    run_id: str
    agent: str | None
    tool: str
    figures: Mapping[str, Any]
    nudge: str
    handoff: str
    tokens: int = 0

    @property
    def event(self) -> str:
        """The span event name: ``no_progress`` or ``livelock``."""
        return self.reason.event

    def event_attributes(self) -> dict[str, Any]:
        """The attributes of the span event, in the documented schema (string values
        within :data:`otel_progress.model.limits.MAX_ATTRIBUTE_BYTES`)."""
        attrs: dict[str, Any] = {
            "progress.reason": self.reason.value,
            "progress.turn": self.turn,
            "progress.level": int(self.level),
            "progress.action": self.level.action,
            "progress.scope": self.scope.value,
            "progress.tool": attribute_value(self.tool),
        }
        for key, value in self.figures.items():
            attrs["progress." + key] = attribute_value(value)
        return attrs

    def span_attributes(self) -> dict[str, Any]:
        """Attributes for the span, for backends that cannot filter on events."""
        return {
            "progress.detected": True,
            "progress.reason": self.reason.value,
            "progress.level": int(self.level),
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (used by ``otel-progress scan``)."""
        return {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "run_id": self.run_id,
            "agent": self.agent,
            "event": self.event,
            "reason": self.reason.value,
            "turn": self.turn,
            "level": int(self.level),
            "action": self.level.action,
            "scope": self.scope.value,
            "tool": self.tool,
            "tokens": self.tokens,
            "figures": dict(self.figures),
            "nudge": self.nudge,
            "handoff": self.handoff,
        }
