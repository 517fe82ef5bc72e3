"""State-signature livelock (seed 003): the same decision-relevant state, k times, with
nothing new admitted between the visits."""

from __future__ import annotations

from typing import Any

from ...model import Finding, Reason
from ..step import Step
from .base import Signal, record_visit

__all__ = ["SignatureSignal"]


class SignatureSignal(Signal):
    """The signature is a digest of goal, plan node, the normalised action (lower-cased,
    whitespace folded, id fields dropped), the evidence set, the open obligations and
    ``blocked_on``, taken before the step's own result is admitted. Without published
    evidence the evidence set is the distinct results admitted so far in the run, so a
    repeated signature means nothing new arrived between the visits (an empty delta).
    ``signature_visits`` visits fire ``livelock`` with the tokens burned across them,
    unless the last visit itself admitted something new (a retry that finally worked).
    Steps whose result is only a size or a truncated preview are not visits: an equal
    one does not show that nothing new was admitted."""

    name = "signature"

    def new_state(self) -> dict[int, list[int]]:
        return {}

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        signature = run.step_signature
        if signature is None or step.exempt or step.partial:
            return None  # (a partial result cannot show that nothing new was admitted)
        if run.derived_evidence_changed:
            state.clear()  # old signatures carry an older evidence set: they cannot recur
        k = self.config.signature_visits
        visits = record_visit(state, signature, step.tokens, k)
        if len(visits) < k or step.new_evidence:
            return None  # the k-th visit itself brought something new: e.g. a retry that worked
        burned = visits[-1] - visits[0]
        return Finding(
            Reason.SIGNATURE_REPEAT,
            {"visits": len(visits), "tokens_burned": burned,
             "signature": run.hex(run.exported_signature(step))},
            f"the run came back to the same decision state {len(visits)} times with nothing"
            f" new admitted in between, burning {burned} tokens",
        )
