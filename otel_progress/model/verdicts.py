"""Other detectors' verdicts: a loop check of the application's own that wrote telemetry.

Some applications already run a loop check: Pydantic AI Harness's ``LoopDetection``
capability (a ``loop_detection.detected`` span event), Gemini CLI's and Qwen Code's loop
detection (a ``loop_detected`` log record), an evaluator writing ``gen_ai.evaluation.result`` about a
loop. otel-progress reads such a verdict (the readers are in
:mod:`otel_progress.conventions.verdicts` and the Gemini CLI log reader), keeps it with its
run (:class:`otel_progress.runs.verdicts.VerdictBook`, bounded) and never reports it itself:
its detector already did. A detection of ours on the same run, made while the loop the
verdict named can still be the one it reports (the verdict read at most ``window`` turns
before it: see :func:`corroborates`), carries it as corroboration
(:func:`corroborated`: the figures ``corroborated_by``, ``corroborating_kind``,
``corroborating_turn``), so one loop is one detection of ours naming both detectors.
docs/detection.md ("Other detectors' verdicts") documents the rule and each output.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import Detection

__all__ = [
    "EVALUATION_RESULT", "GEMINI_CLI", "PYDANTIC_AI_HARNESS", "QWEN_CODE", "Verdict", "corroborated", "corroborates",
]

#: ``Verdict.source`` of Pydantic AI Harness's ``LoopDetection`` (span event ``loop_detection.detected``).
PYDANTIC_AI_HARNESS = "pydantic_ai_harness.loop_detection"
#: ``Verdict.source`` of Gemini CLI's loop detection (log record ``loop_detected``).
GEMINI_CLI = "gemini_cli.loop_detected"
#: ``Verdict.source`` of Qwen Code's loop detection (log record ``loop_detected``, scope ``qwen-code``).
QWEN_CODE = "qwen_code.loop_detected"
#: ``Verdict.source`` prefix of another evaluator's ``gen_ai.evaluation.result``: the source
#: is ``gen_ai.evaluation.result:<gen_ai.evaluation.name>``.
EVALUATION_RESULT = "gen_ai.evaluation.result"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Another detector's report that a run is looping.

    Attributes:
        source: who reported it (:data:`PYDANTIC_AI_HARNESS`, :data:`GEMINI_CLI`, :data:`QWEN_CODE`,
            ``gen_ai.evaluation.result:<evaluation name>``).
        kind: what it reported: the loop type or tier (``exact_repetition``,
            ``consecutive_identical_tool_calls``, ``llm_detected_loop``, an evaluation's
            label, ...), ``""`` when it says none.
        trace_id, run_id: the run, as the engine knows it (a log reader gives its run key as
            both; a span reader leaves them to the driver, which resolves the span's run).
        span_id: the span (or record) that carried it.
        time_ns: when it was reported, Unix ns (0: unknown).
        tool: the tool it names, when it names one.
        count: its own count (repetitions, strikes), when it gives one.
        turn: the run's position when the verdict was read (set by the run model: the steps
            read so far, evaluated or not).
    """

    source: str
    kind: str = ""
    trace_id: str = ""
    run_id: str = ""
    span_id: str = ""
    time_ns: int = 0
    tool: str | None = None
    count: int | None = None
    turn: int = 0


def corroborates(verdict: Verdict, detection: Detection, window: int) -> bool:
    """Whether ``verdict`` names the loop ``detection`` reports, given that the detection
    was made after the verdict was read (the run model applies it where detections are
    made): the same run (trace and run keys), and the detection's turn at most ``window``
    turns from the verdict's (the stretch of steps our signals look back over: a verdict
    further back was about an earlier stretch of the run)."""
    if verdict.trace_id != detection.trace_id or verdict.run_id != detection.run_id:
        return False
    return abs(detection.turn - verdict.turn) <= max(window, 0)


def corroborated(detection: Detection, verdict: Verdict) -> Detection:
    """``detection`` carrying ``verdict``: the figures ``corroborated_by`` (its source),
    ``corroborating_kind`` (what it reported, when it says) and ``corroborating_turn``."""
    figures = dict(detection.figures)
    figures["corroborated_by"] = verdict.source
    if verdict.kind:
        figures["corroborating_kind"] = verdict.kind
    figures["corroborating_turn"] = verdict.turn
    return replace(detection, figures=figures)
