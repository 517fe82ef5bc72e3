"""Monotone measure (seed 003): a published measure that does not improve over visits."""

from __future__ import annotations

from typing import Any

from ...model import Finding, Reason
from ..step import Step
from .base import Signal, record_visit

__all__ = ["MeasureSignal"]

_MAX_NODES = 16


class MeasureSignal(Signal):
    """Where steps publish ``progress.measure`` (a quantity that must go down as the run
    progresses: unresolved subgoals, a remaining mismatch), ``measure_visits`` visits to
    one plan node without the measure dropping below its value at the first of them fire
    ``stalled_measure``, even when the evidence set grew."""

    name = "measure"

    def new_state(self) -> dict[str, list[float]]:
        return {}

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        measure = run.step_measure
        if measure is None:
            return None
        node = run.step_node or ""
        k = self.config.measure_visits
        values = record_visit(state, node, measure, k, _MAX_NODES)
        if len(values) < k or min(values[1:]) < values[0]:
            return None
        return Finding(
            Reason.STALLED_MEASURE,
            {"visits": len(values), "measure": values[-1]},
            f"the published measure has not improved over the last {len(values)} visits"
            " to this plan node",
        )
