"""A detection as a ``gen_ai.evaluation.result`` log event, for both adapters.

OpenTelemetry is deprecating the Span Event API in favour of events emitted through the
Logs API and correlated with the span (OTEP 4430, "Span Event API deprecation plan"), and
the GenAI semantic conventions define the event an evaluator emits about a GenAI
operation: ``gen_ai.evaluation.result`` (``model/gen-ai/events.yaml`` of
open-telemetry/semantic-conventions-genai: ``gen_ai.evaluation.name`` required,
``gen_ai.evaluation.score.value`` / ``.score.label`` when applicable,
``gen_ai.evaluation.explanation`` recommended, "parented to the GenAI operation span
being evaluated"). otel-progress is such an evaluator: each detection is one record,
in the context (trace id, span id) of the span the detection belongs on.

This module is the encoding, with no SDK or protobuf imports; the in-process processor
(:mod:`otel_progress.processor.log_events`, through the SDK's Logs API) and
``otel-progress serve`` (:mod:`otel_progress.service.log_events`, as OTLP protobuf) write
what :func:`evaluation_event` returns. The record, as documented in docs/telemetry.md
("Telemetry schema"):

======================================  =================================================
field                                   value
======================================  =================================================
event name (and attribute               ``gen_ai.evaluation.result``
``event.name``)
trace id, span id                       the detection's span (the offending tool span, or
                                        for run scope the sub-agent's span)
severity                                ``WARN`` (13)
body                                    the explanation (below)
``gen_ai.evaluation.name``              ``progress.no_progress`` or ``progress.livelock``
``gen_ai.evaluation.score.label``       the reason (``repeat_cycle``, ``barren``, ...)
``gen_ai.evaluation.score.value``       the escalation level as a double: 1.0 nudge,
                                        2.0 restart, 3.0 park
``gen_ai.evaluation.explanation``       one line: who, where, why, what to do
``progress.event``                      ``no_progress`` or ``livelock`` (the span event)
``progress.*``                          the span event's attributes
                                        (:meth:`Detection.event_attributes`)
``gen_ai.agent.name``                   the agent, when known
======================================  =================================================

Like every annotation of the project, a record never carries a tool's arguments or
results (nor the nudge and handoff texts, which quote what the agent did): only names,
counts and digests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import Detection
from .limits import attribute_value

__all__ = [
    "DETECTION_EVENTS", "EVALUATION_NAMES", "EVENT_NAME", "SEVERITY_NUMBER", "SEVERITY_TEXT", "EvaluationEvent",
    "detection_events", "evaluation_event", "evaluation_name", "explanation",
]

#: The log event's name (the record's ``event_name`` and its ``event.name`` attribute).
EVENT_NAME = "gen_ai.evaluation.result"
#: OpenTelemetry's severity number of ``WARN`` (and its text): as the detection records
#: of coding agents' log input.
SEVERITY_NUMBER = 13
SEVERITY_TEXT = "WARN"
#: ``gen_ai.evaluation.name`` of each span event name.
EVALUATION_NAMES: Mapping[str, str] = {"no_progress": "progress.no_progress", "livelock": "progress.livelock"}

#: Where detections go, the ``detection_events`` setting of the processor and of ``serve``:
#: ``span`` (span events and attributes, as before log events existed), ``log`` (log
#: events only: spans are left as they are) or ``both`` (the default while the
#: OpenTelemetry bridge from log-based events to span events is in development).
DETECTION_EVENTS = ("both", "span", "log")


def detection_events(value: Any, source: str) -> str:
    """``value`` as one of :data:`DETECTION_EVENTS`; ``ValueError`` naming ``source``."""
    mode = str(value).strip().lower()
    if mode not in DETECTION_EVENTS:
        raise ValueError(f"{source}: expected {', '.join(DETECTION_EVENTS)}, got {value!r}")
    return mode


@dataclass(frozen=True, slots=True)
class EvaluationEvent:
    """The log record of one detection, in neutral terms (each adapter writes it out).

    Attributes:
        trace_id, span_id: hex ids of the span the record is parented to.
        event_name: :data:`EVENT_NAME`.
        severity_number, severity_text: :data:`SEVERITY_NUMBER`, :data:`SEVERITY_TEXT`.
        body: the explanation (a string).
        attributes: the record's attributes, in the documented order.
    """

    trace_id: str
    span_id: str
    event_name: str
    severity_number: int
    severity_text: str
    body: str
    attributes: Mapping[str, Any]


def evaluation_name(det: Detection) -> str:
    """``gen_ai.evaluation.name`` of a detection: ``progress.no_progress`` or
    ``progress.livelock``."""
    return EVALUATION_NAMES.get(det.event, "progress." + det.event)


def _figure(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def explanation(det: Detection) -> str:
    """One line, e.g. ``planner stopped making progress at turn 7: repeat_cycle (period 2,
    window 10) on search_docs; level 2, restart``. Names, counts and digests only."""
    who = det.agent or "the agent"
    what = "is in a livelock" if det.event == "livelock" else "stopped making progress"
    figures = ", ".join(f"{key.replace('_', ' ')} {_figure(value)}" for key, value in det.figures.items())
    scope = " (across the agents of the run)" if det.scope.value == "run" else ""
    text = (f"{who} {what} at turn {det.turn}{scope}: {det.reason.value}"
            f"{f' ({figures})' if figures else ''} on {det.tool or 'its tools'};"
            f" level {int(det.level)}, {det.level.action}")
    return attribute_value(text)  # type: ignore[no-any-return]


def evaluation_event(det: Detection) -> EvaluationEvent:
    """The ``gen_ai.evaluation.result`` record of ``det`` (see the module docstring)."""
    text = explanation(det)
    attrs: dict[str, Any] = {
        "event.name": EVENT_NAME,
        "gen_ai.evaluation.name": evaluation_name(det),
        "gen_ai.evaluation.score.label": det.reason.value,
        "gen_ai.evaluation.score.value": float(int(det.level)),
        "gen_ai.evaluation.explanation": text,
        "progress.event": det.event,
    }
    attrs.update(det.event_attributes())
    if det.agent:
        attrs["gen_ai.agent.name"] = attribute_value(det.agent)
    return EvaluationEvent(det.trace_id, det.span_id, EVENT_NAME, SEVERITY_NUMBER, SEVERITY_TEXT, text, attrs)
