"""Location revisits (seeds 000, 004; issue 15): the run keeps arriving at places it has
already seen, finding there what it found before."""

from __future__ import annotations

from typing import Any

from ...model import Finding, Reason
from ..step import Step
from .revisit import StateRevisitSignal, revisited

__all__ = ["LocationRevisitSignal"]


class LocationRevisitSignal(StateRevisitSignal):
    """Follows the state of the location each step's result shows (``CallFacts.place``:
    the location and what it showed there, see ``views.py``), as the state-revisit signal
    follows a published state. Arriving at a location state seen earlier in the run (the
    same page, position and content, reached again by any request: another link, a
    reworded search, a replayed path) is a revisit; arriving at a new one takes one back,
    so a single return to a hub page between new pages never adds up (seed 004's
    progress signal). ``location_revisit_threshold`` revisits fire ``state_revisit``.
    Steps that show no location, or stay where they are, change nothing."""

    name = "location"

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        if run.views is None or step.recovery:
            return None  # no result of the run has shown a location yet; or a re-read after a compaction
        place = None
        for facts in step.facts:
            if facts.place is not None:
                place = facts.place
        if place is None or not revisited(state, place):
            return None
        if state.revisits < self.config.location_revisit_threshold:
            return None
        return Finding(
            Reason.STATE_REVISIT,
            {"revisits": state.revisits, "locations": len(state.seen)},
            f"the run arrived again at places it had already seen, finding nothing new there"
            f" ({state.revisits} times without reaching a new one)",
        )
