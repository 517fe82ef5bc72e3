"""Monotone measure (seed 003): a published measure that does not improve over visits."""

from __future__ import annotations

from typing import Any

from ..model import Finding, Reason
from .base import Signal, Step

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
        values = state.get(node)
        if values is None:
            if len(state) >= _MAX_NODES:
                state.pop(next(iter(state)))
            values = state[node] = []
        values.append(measure)
        k = self.config.measure_visits
        if len(values) > k:
            del values[0]
        if len(values) < k or min(values[1:]) < values[0]:
            return None
        return Finding(
            Reason.STALLED_MEASURE,
            {"visits": len(values), "measure": values[-1]},
            f"the published measure has not improved over the last {len(values)} visits"
            " to this plan node",
        )
