"""Run scope (seed 003): a livelock spread across agents, which no single agent sees."""

from __future__ import annotations

from typing import Any

from ...model import Finding, Reason, Scope
from ..step import Step
from .base import Signal, record_visit

__all__ = ["RunSignatureSignal"]


class RunSignatureSignal(Signal):
    """Evaluated each time a sub-agent invocation completes, over the whole trace: the
    distinct results admitted by all its agents and the current plan node. When that
    shared state is the same at ``signature_visits`` completions, the agents are lapping
    a loop between them (each sub-agent starts fresh, the planner's own ids change, the
    shared results do not), and ``livelock`` fires with scope ``run``."""

    name = "run_signature"
    scope = Scope.RUN

    def new_state(self) -> dict[int, list[int]]:
        return {}

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        signature = run.trace_signature()
        if signature not in state:
            state.clear()  # the shared state moved on: earlier signatures cannot recur
        k = self.config.signature_visits
        visits = record_visit(state, signature, step.tokens, k)
        if len(visits) < k:
            return None
        burned = visits[-1] - visits[0]
        return Finding(
            Reason.SIGNATURE_REPEAT,
            {"visits": len(visits), "tokens_burned": burned, "signature": run.hex(signature)},
            f"{len(visits)} sub-agent invocations in a row left the shared state of the run"
            f" unchanged, burning {burned} tokens",
            Scope.RUN,
        )
