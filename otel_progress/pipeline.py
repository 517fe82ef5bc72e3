"""One run's state and the pipeline that turns its tool calls into steps and detections.

Calls wait in a small reorder buffer (ordered by start time) until their step is known
to be complete; parallel calls from one model response (same parent span, overlapping in
time) become one step. Each step's digests are computed once, then the signals run in
order, cheap first, stopping at the first finding. A finding becomes a detection with an
escalation level; every signal then forgets the evidence of that loop, so the next
detection (the next level) must rest on new evidence. An ongoing loop is therefore not
re-announced each turn, and nothing is announced past level 3.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from typing import Any

from .canonical import Digester, error_signature_text, normalise_action, parse_json_value
from .config import Config
from .escalation import Attempt, handoff_note, nudge_text
from .model import NOT_CAPTURED, Detection, Finding, Level, Scope, ToolCall
from .signals import CallFacts, Signal, Step

__all__ = ["Pipeline", "RunState"]

_SEP = b"\x1f"
_RAW_MIN = 512  # JSON results at least this long may be digested without parsing
_JSON_OPEN = ("{", "[")
_STATUS_MARKERS = ('"status"', '"state"', '"phase"')  # implicit waits need the parsed status
_MASK = (1 << 63) - 1
_SEEN_IDS = 24
_MAX_ATTEMPTS = 5
_EMPTY_TEXT = re.compile(
    r"^(?:(?:0|no|zero|none)\s+(?:results?|matches|hits|items|documents|docs|records|rows|entries|files)"
    r"(?:\s+found)?|no\s+results?\s+found|nothing\s+found|not\s+found|none|null|\[\]|\{\})\.?$",
    re.IGNORECASE,
)


_ACK_TEXT = re.compile(
    r"^(?:ok|okay|done|success|succeeded|saved|updated|written|applied|created|deleted|modified|true"
    r"|successfully\b[^\n]{0,200}|(?:file|changes?)\s+(?:saved|written|updated|applied)[^\n]{0,120})\.?$",
    re.IGNORECASE,
)
_ACK_KEYS = frozenset({"ok", "success", "status", "result", "message", "updated", "written", "applied"})


def _is_ack(value: Any) -> bool:
    """Whether a parsed result only acknowledges that a request was carried out."""
    if value is True:
        return True
    if isinstance(value, str):
        return len(value) <= 300 and bool(_ACK_TEXT.match(value.strip()))
    if isinstance(value, Mapping) and 0 < len(value) <= 3 and set(value) <= _ACK_KEYS:
        return all(v is True or (isinstance(v, (str, int)) and _is_ack(str(v))) or v in (1, 200, 201, 204)
                   for v in value.values())
    return False


def _is_empty(value: Any, depth: int = 0) -> bool:
    """Whether a parsed result carries nothing: no text, no items, only zeros."""
    if value is None or value is False:
        return True
    if isinstance(value, str):
        text = value.strip()
        return not text or bool(_EMPTY_TEXT.match(text))
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value == 0
    if depth > 4:
        return False
    if isinstance(value, Mapping):
        return all(_is_empty(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_is_empty(v, depth + 1) for v in value)
    return False


def admit(evidence: array[int], digest: int, cap: int) -> bool:
    """Add a digest to a sorted array of distinct digests; False if it was there.
    Past ``cap`` entries the array is emptied: forgetting can only hide a loop, never
    invent one."""
    i = bisect_left(evidence, digest)
    if i < len(evidence) and evidence[i] == digest:
        return False
    if len(evidence) >= cap:
        del evidence[:]
        i = 0
    evidence.insert(i, digest)
    return True


_SHAPES: dict[str, str] = {}


def _shape(name: str, arguments: Any) -> str:
    """``tool(arg1, arg2)``: argument names only, never values. Shapes repeat across
    runs, so one copy of each is shared (a bounded table)."""
    if isinstance(arguments, Mapping):
        shape = f"{name}({', '.join(sorted(str(k) for k in arguments)[:6])})"
    else:
        shape = f"{name}(…)" if arguments not in (None, NOT_CAPTURED, "", {}) else f"{name}()"
    shared = _SHAPES.get(shape)
    if shared is None:
        if len(_SHAPES) >= 4096:
            _SHAPES.clear()
        shared = _SHAPES[shape] = shape
    return shared


class RunState:
    """Everything the engine remembers about one agent run. Kept small: windows are
    bounded by the configuration, tables by fixed caps."""

    __slots__ = (
        "agent",
        "attempts",
        "best_goal",
        "derived_evidence_changed",
        "detections",
        "duplicates",
        "evidence",
        "evidence_version",
        "first_detection_tokens",
        "first_detection_turn",
        "goal_improved",
        "last_plan_step",
        "last_state",
        "late",
        "level",
        "pending",
        "pipeline",
        "plan_advanced",
        "run_id",
        "seen",
        "seen_pos",
        "sig_evidence_version",
        "states",
        "step_measure",
        "step_node",
        "step_signature",
        "step_state",
        "tokens",
        "trace",
        "turn",
        "watermark_ns",
    )

    def __init__(self, pipeline: Pipeline, trace: Any, run_id: str, agent: str | None) -> None:
        self.pipeline = pipeline
        self.trace = trace
        self.run_id = run_id
        self.agent = agent
        self.turn = 0
        self.tokens = 0
        self.level = 0
        self.detections = 0
        self.first_detection_turn: int | None = None
        self.first_detection_tokens = 0
        self.states: list[Any] = [s.new_state() for s in pipeline.signals]
        self.evidence = array("q")  # sorted distinct result digests
        self.evidence_version = 0
        self.sig_evidence_version = -1
        self.last_plan_step: str | None = None
        self.last_state: str | None = None
        self.best_goal: float | None = None
        self.pending: list[ToolCall] = []
        self.seen = array("q", bytes(8 * _SEEN_IDS))
        self.seen_pos = 0
        self.watermark_ns = 0
        self.late = 0
        self.duplicates = 0
        self.attempts: dict[int, Attempt] = {}
        # per-step facts, set by the pipeline before the signals run
        self.plan_advanced = False
        self.goal_improved = False
        self.step_state: str | None = None
        self.step_signature: int | None = None
        self.step_measure: float | None = None
        self.step_node: str | None = None
        self.derived_evidence_changed = False

    def hex(self, digest: int) -> str:
        """The exported form of a digest."""
        return self.pipeline.digester.hex(digest)

    @property
    def wasted_turns(self) -> int:
        """Turns taken after the run's first detection."""
        return 0 if self.first_detection_turn is None else self.turn - self.first_detection_turn

    @property
    def wasted_tokens(self) -> int:
        """Tokens consumed after the run's first detection."""
        return 0 if self.first_detection_turn is None else self.tokens - self.first_detection_tokens

    def remember(self, span_id: str) -> bool:
        """Record a span id; False if it was seen recently (a redelivered span)."""
        h = hash(span_id) if span_id else 0
        if h and h in self.seen:
            return False
        self.seen[self.seen_pos] = h
        self.seen_pos = (self.seen_pos + 1) % _SEEN_IDS
        return True


class Pipeline:
    """The signals in order plus the step construction and escalation they share."""

    def __init__(self, config: Config, signals: Sequence[Signal], digester: Digester) -> None:
        self.config = config
        self.signals = tuple(signals)
        self.digester = digester
        self._want_action = any(s.name in ("signature",) for s in self.signals)
        self._write_tools = frozenset(n for n, s in config.manifest.items() if s.kind == "write")
        self._wait_tools = frozenset(n for n, s in config.manifest.items() if s.kind == "wait")

    # -- steps ------------------------------------------------------------------------

    def _may_be_waiting(self, text: str) -> bool:
        """Whether a raw JSON result has a ``status``/``state``/``phase`` field whose value
        is a waiting value (then it must be parsed, for the implicit wait check)."""
        if not self.config.implicit_waits:
            return False
        waiting = self.config.waiting_values
        for marker in _STATUS_MARKERS:
            i = text.find(marker)
            while i >= 0:
                value = text[i + len(marker): i + len(marker) + 48].lstrip(' :\t\n"')
                end = value.find('"')
                if value[:end if end >= 0 else len(value)].strip().lower() in waiting:
                    return True
                i = text.find(marker, i + 1)
        return False

    def facts(self, call: ToolCall) -> CallFacts:
        """Compute the digests of one call."""
        d = self.digester
        name = call.name
        has_args = call.arguments is not NOT_CAPTURED and call.arguments is not None
        args = parse_json_value(call.arguments) if has_args else None
        args_bytes = d.arguments(args) if has_args else b""
        request = name.encode("utf-8", "surrogatepass") + _SEP + args_bytes
        call_digest = d.digest(request)
        result_digest: int | None = None
        parsed: Any = None
        empty = True
        ack = False
        result = call.result
        if (
            type(result) is str
            and len(result) >= _RAW_MIN
            and result[:1] in _JSON_OPEN
            and name not in self._wait_tools
            and not self._may_be_waiting(result)
            and d.raw_result_ok(result, name)
        ):
            # A long JSON result of a tool without volatile fields: digest it as received.
            # It is neither empty nor an acknowledgement, and carries no wait status.
            result_digest = d.digest(result.encode("utf-8", "surrogatepass"))
            empty = False
        elif result is not NOT_CAPTURED and not (call.error and result is None):
            result_bytes, parsed = d.result(result, name)
            result_digest = d.digest(result_bytes)
            empty = _is_empty(parsed)
            ack = not call.error and not empty and _is_ack(parsed)
        error: int | None = None
        if call.error:
            error = d.text(error_signature_text(name, call.error_type, call.error_message))
        # The turn key: the request and what came back. A failed call has no key: a retry
        # after a transient error is legitimate; repeated failures are judged by the
        # error-recurrence and state-signature signals instead.
        key: int | None = None
        if result_digest is not None and not call.error:
            key = hash((call_digest, result_digest)) & _MASK
        action = None
        if self._want_action and (has_args or result_digest is not None):
            action = d.digest(normalise_action(name, args))
        return CallFacts(
            tool=name,
            key=key,
            call=call_digest,
            result=result_digest,
            parsed_result=parsed,
            empty=empty,
            ack=ack,
            error=error,
            action=action,
            args=args,
            span_id=call.span_id,
        )

    def make_step(self, run: RunState, calls: list[ToolCall]) -> Step:
        """Build the next step of ``run`` from a complete group of calls."""
        facts = tuple(self.facts(c) for c in calls)
        if len(facts) == 1:
            key = facts[0].key
        elif any(f.key is None for f in facts):
            key = None
        else:
            key = self.digester.text(",".join(str(k) for k in sorted(f.key for f in facts)))  # type: ignore[type-var]
        last = max(calls, key=lambda c: c.end_ns)
        run.turn += 1
        return Step(
            turn=run.turn,
            calls=tuple(calls),
            facts=facts,
            key=key,
            tool="+".join(sorted({f.tool for f in facts})),
            start_ns=min(c.start_ns for c in calls),
            end_ns=last.end_ns,
            span_id=last.span_id,
            tokens=run.tokens,
            wrote=any(c.name in self._write_tools and not c.error for c in calls),
        )

    def _step_facts(self, run: RunState, step: Step) -> None:
        """Set the run's per-step facts (published attributes, evidence, signature)."""
        calls = step.calls
        first = calls[0]
        if len(calls) == 1:
            plan_step, goal_distance, state, measure = first.plan_step, first.goal_distance, first.state, first.measure
        else:
            plan_step = next((c.plan_step for c in reversed(calls) if c.plan_step is not None), None)
            goal_distance = next((c.goal_distance for c in calls if c.goal_distance is not None), None)
            state = next((c.state for c in reversed(calls) if c.state is not None), None)
            measure = next((c.measure for c in calls if c.measure is not None), None)
        run.plan_advanced = plan_step is not None and plan_step != run.last_plan_step
        if plan_step is not None:
            run.last_plan_step = plan_step
        run.goal_improved = False
        if goal_distance is not None:
            run.goal_improved = run.best_goal is not None and goal_distance < run.best_goal
            if run.best_goal is None or goal_distance < run.best_goal:
                run.best_goal = goal_distance
        run.step_state = state
        if state is not None:
            # A write is progress only if it changed the state, where a state is published.
            if step.wrote and state == run.last_state:
                step.wrote = False
            run.last_state = state
        run.step_measure = measure
        run.step_node = first.node
        # The signature is taken before the step's own results are admitted.
        run.step_signature = None
        facts = step.facts
        if self._want_action and all(f.action is not None for f in facts):
            evidence = first.evidence
            if evidence is not None:
                evidence_part = "e:" + ",".join(sorted(evidence))
                run.derived_evidence_changed = False
            else:
                evidence_part = f"v:{run.evidence_version}"
                run.derived_evidence_changed = run.evidence_version != run.sig_evidence_version
                run.sig_evidence_version = run.evidence_version
            if len(facts) == 1:
                actions = str(facts[0].action)
            else:
                actions = ",".join(str(a) for a in sorted(f.action for f in facts))  # type: ignore[type-var]
            obligations = ",".join(sorted(first.obligations)) if first.obligations else ""
            run.step_signature = self.digester.text(
                "\x1f".join((first.goal or "", first.node or "", actions, evidence_part, obligations,
                              first.blocked_on or ""))
            )
        # Admit the step's results as evidence.
        cap = self.config.max_evidence
        for f in step.facts:
            if f.result is None or f.empty:
                continue
            if admit(run.evidence, f.result, cap):
                run.evidence_version += 1
                step.new_evidence += 1
            run.trace.admit(f.result)
        # Remember attempts for the handoff note.
        for call, f in zip(calls, step.facts, strict=False):
            attempt = run.attempts.get(f.call)
            if attempt is None:
                if len(run.attempts) >= _MAX_ATTEMPTS:
                    run.attempts.pop(next(iter(run.attempts)))
                attempt = run.attempts[f.call] = Attempt(_shape(f.tool, f.args), f.call)
            attempt.count += 1
            if call.error:
                attempt.failures += 1

    def run_step(self, run: RunState, calls: list[ToolCall]) -> Detection | None:
        """Evaluate one complete group of calls; return the detection to announce, if any."""
        step = self.make_step(run, calls)
        self._step_facts(run, step)
        states = run.states
        for i, signal in enumerate(self.signals):
            finding = signal.evaluate(step, states[i], run)
            if finding is not None:
                return self.escalate(run, step, finding)
        return None

    def escalate(self, run: RunState, step: Step, finding: Finding) -> Detection | None:
        """Turn a finding into a detection with its level, and reset the signals."""
        run.detections += 1
        if run.first_detection_turn is None:
            run.first_detection_turn = step.turn
            run.first_detection_tokens = step.tokens
        for i, signal in enumerate(self.signals):
            run.states[i] = signal.reset(run.states[i])
        if run.level >= Level.PARK:
            return None  # parked: counted, not announced again
        run.level += 1
        level = Level(run.level)
        return Detection(
            reason=finding.reason,
            turn=step.turn,
            level=level,
            scope=Scope.AGENT,
            trace_id=run.trace.trace_id,
            span_id=step.span_id,
            run_id=run.run_id,
            agent=run.agent,
            tool=step.tool,
            figures=finding.figures,
            nudge=nudge_text(finding, level, step.turn, run.first_detection_turn),
            handoff=handoff_note(finding, step.turn, run.attempts.values()),
            tokens=step.tokens,
        )
