"""Other detectors' verdicts on spans (:class:`~otel_progress.model.verdicts.Verdict`).

Read from their code:

* Pydantic AI Harness ``LoopDetection`` (``pydantic_ai_harness/loop_detection/_capability.py``
  of pydantic/pydantic-ai-harness @ ``f62e67ee976f5fc239c24e7c73958a517dd818a6``; not in a
  PyPI release up to 0.62.0): on detection ``_emit_event`` adds the span event
  ``loop_detection.detected`` to the current span, with ``loop.tier`` (``exact_repetition``,
  ``error_cycle``, ``alternation``, ``monologue``), ``loop.tool_name`` (``""`` for a
  monologue), ``loop.count``, ``loop.window``. In pydantic-ai 2.68 the current span is the
  tool's ``execute_tool`` span for ``error_cycle`` (``after_tool_execute``) and the model
  request's ``chat`` span for the others (``after_model_request``)
  (``tests/frameworks/test_loop_verdicts.py``).
* ``gen_ai.evaluation.result`` (the GenAI semantic conventions' evaluation event) as a span
  event: ``gen_ai.evaluation.name``, ``gen_ai.evaluation.score.label``,
  ``gen_ai.evaluation.score.value``, ``gen_ai.evaluation.explanation``. It is a verdict
  about a loop when its name, label or explanation says ``loop`` (an evaluator of anything
  else is no loop check), and not a verdict at all when it is otel-progress's own: a name
  in the ``progress.`` namespace (``progress.no_progress`` / ``progress.livelock``), or a
  ``progress.event`` attribute (docs/telemetry.md): ours are never taken for another's.

Readers are total: odd values give no verdict, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..model.verdicts import EVALUATION_RESULT, PYDANTIC_AI_HARNESS, Verdict
from .base import as_number, as_text
from .record import SpanRecord

__all__ = ["HARNESS_EVENT", "evaluation_verdict", "is_own_evaluation", "read_span_verdicts"]

#: The span event Pydantic AI Harness's ``LoopDetection`` adds on detection.
HARNESS_EVENT = "loop_detection.detected"
_OWN_PREFIX = "progress."
_LOOP_WORDS = ("loop", "repetit", "repeat", "stuck", "no_progress", "livelock")


def _count(value: Any) -> int | None:
    number = as_number(value)
    if number is None or number != number or abs(number) > 2**31:
        return None
    return int(number)


def is_own_evaluation(attributes: Mapping[str, Any]) -> bool:
    """Whether a ``gen_ai.evaluation.result`` is otel-progress's own (its name is in the
    ``progress.`` namespace, or it carries ``progress.event``)."""
    name = as_text(attributes.get("gen_ai.evaluation.name")) or ""
    return name.startswith(_OWN_PREFIX) or "progress.event" in attributes


def evaluation_verdict(attributes: Mapping[str, Any], *, span_id: str = "", time_ns: int = 0) -> Verdict | None:
    """The verdict of another evaluator's ``gen_ai.evaluation.result`` (a span event's or a
    log record's attributes) when it reports a loop; ``None`` otherwise, and for ours."""
    if not isinstance(attributes, Mapping) or is_own_evaluation(attributes):
        return None
    name = as_text(attributes.get("gen_ai.evaluation.name")) or ""
    label = as_text(attributes.get("gen_ai.evaluation.score.label")) or ""
    explanation = as_text(attributes.get("gen_ai.evaluation.explanation")) or ""
    said = f"{name} {label} {explanation[:512]}".lower()
    if not name or not any(word in said for word in _LOOP_WORDS):
        return None
    return Verdict(source=f"{EVALUATION_RESULT}:{name[:128]}", kind=label[:128], span_id=span_id, time_ns=time_ns)


def _harness_verdict(attributes: Mapping[str, Any], span: SpanRecord) -> Verdict:
    tier = as_text(attributes.get("loop.tier")) or ""
    tool = as_text(attributes.get("loop.tool_name")) or None
    return Verdict(source=PYDANTIC_AI_HARNESS, kind=tier[:128], span_id=span.span_id, time_ns=span.end_ns,
                   tool=tool[:256] if tool else None, count=_count(attributes.get("loop.count")))


def read_span_verdicts(span: SpanRecord) -> list[Verdict]:
    """The verdicts in a span's events (``loop_detection.detected``, another evaluator's
    ``gen_ai.evaluation.result`` about a loop), in event order. Their run is left to the
    driver; their time is the span's end (span records keep no event times)."""
    out: list[Verdict] = []
    try:
        events = span.events or ()
        for event in events:
            if not isinstance(event, tuple) or len(event) != 2:
                continue
            name, attributes = event
            if not isinstance(attributes, Mapping):
                continue
            if name == HARNESS_EVENT:
                out.append(_harness_verdict(attributes, span))
            elif name == EVALUATION_RESULT:
                verdict = evaluation_verdict(attributes, span_id=span.span_id, time_ns=span.end_ns)
                if verdict is not None:
                    out.append(verdict)
    except Exception:  # a reader is total: an odd event list gives what was read so far
        return out
    return out
