"""What the engine reports about itself and about a run: its counters
(:class:`EngineStats`) and a run's summary when it ends (:class:`RunSummary`).

Both are public (``from otel_progress.engine import EngineStats, RunSummary``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..model import Detection

if TYPE_CHECKING:
    from .runstate import RunState

__all__ = ["EngineStats", "RunSummary", "summarise"]


@dataclass
class EngineStats:
    """Counters about what the engine has seen and dropped."""

    calls: int = 0
    steps: int = 0
    detections: int = 0
    suppressed: int = 0
    duplicates: int = 0
    late_calls: int = 0
    unreadable: int = 0
    runs_evicted: int = 0
    traces_evicted: int = 0
    errors: int = 0
    compactions: int = 0


@dataclass(frozen=True)
class RunSummary:
    """What happened in one run, reported when it ends."""

    trace_id: str
    run_id: str
    agent: str | None
    turns: int
    tokens: int
    detections: int
    level: int
    first_detection_turn: int | None
    wasted_turns: int
    wasted_tokens: int
    late_calls: int
    detections_list: tuple[Detection, ...] = field(default=())
    #: the input tokens of the model calls in the wasted stretch (RunState.wasted_input_tokens)
    wasted_input_tokens: int = 0


def summarise(trace_id: str, run_id: str, run: RunState | None, detections: list[Detection]) -> RunSummary:
    """The summary of a run that ends (``run``: None when the engine never saw it; then
    only ``detections``, those of the run-scope signature, are reported)."""
    if run is None:
        return RunSummary(trace_id, run_id, None, 0, 0, len(detections), 0, None, 0, 0, 0, tuple(detections))
    return RunSummary(
        trace_id=trace_id,
        run_id=run_id,
        agent=run.agent,
        turns=run.turn,
        tokens=run.tokens,
        detections=run.detections,
        level=run.level,
        first_detection_turn=run.first_detection_turn,
        wasted_turns=run.wasted_turns,
        wasted_tokens=run.wasted_tokens,
        late_calls=run.late,
        detections_list=tuple(detections),
        wasted_input_tokens=run.wasted_input_tokens,
    )
