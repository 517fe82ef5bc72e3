"""Other detectors' verdicts kept per run, and the detections they corroborate.

A :class:`VerdictBook` keeps the verdicts (:class:`~otel_progress.model.verdicts.Verdict`)
read for each run, in the order the drivers read them (a log record at its place in the
run's order, a span event when its span ends), each stamped with the run's position at
that moment (:meth:`~otel_progress.runs.model.RunModel.verdict`);
:meth:`VerdictBook.corroborate` makes a detection carry the latest verdict that
:func:`~otel_progress.model.verdicts.corroborates` it. The book is bounded: at most
:data:`MAX_RUNS` runs (the least recently given a verdict are forgotten first) and
:data:`MAX_PER_RUN` verdicts per run (the latest kept). The run model
(:class:`~otel_progress.runs.model.RunModel`) owns one for all three adapters.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from ..model import Detection
from ..model.verdicts import Verdict, corroborated, corroborates

__all__ = ["MAX_PER_RUN", "MAX_RUNS", "VerdictBook"]

#: Runs whose verdicts are kept (least recently given one forgotten first).
MAX_RUNS = 4096
#: Verdicts kept per run (the latest).
MAX_PER_RUN = 16


class VerdictBook:
    """The verdicts of each run (see the module docstring).

    Args:
        window: how many turns from a verdict a detection made after it may be and still
            report its loop (the run model gives the longest look-back of the engine's
            signals: ``max(window, frequency_window)``).
    """

    __slots__ = ("_runs", "added", "corroborated", "window")

    def __init__(self, window: int = 10) -> None:
        self.window = window
        self._runs: OrderedDict[tuple[str, str], list[Verdict]] = OrderedDict()
        #: verdicts kept, and detections that carried one, since the book was made
        self.added = 0
        self.corroborated = 0

    def __len__(self) -> int:
        return len(self._runs)

    def add(self, verdict: Verdict, turn: int) -> Verdict:
        """Keep ``verdict`` (its ``trace_id`` and ``run_id`` are the run's engine keys),
        read at the run's ``turn``; the verdict as kept."""
        kept = replace(verdict, turn=max(0, turn))
        key = (kept.trace_id, kept.run_id)
        runs = self._runs
        verdicts = runs.get(key)
        if verdicts is None:
            verdicts = runs[key] = []
            while len(runs) > MAX_RUNS:
                runs.popitem(last=False)
        else:
            runs.move_to_end(key)
        verdicts.append(kept)
        if len(verdicts) > MAX_PER_RUN:
            del verdicts[0]
        self.added += 1
        return kept

    def verdicts(self, trace_id: str, run_id: str) -> list[Verdict]:
        """The verdicts kept for a run, oldest first."""
        return list(self._runs.get((trace_id, run_id), ()))

    def corroborate(self, detection: Detection) -> Detection:
        """``detection`` carrying the latest verdict that corroborates it (itself if none
        does, or if it already carries one)."""
        if not self._runs or "corroborated_by" in detection.figures:
            return detection
        verdicts = self._runs.get((detection.trace_id, detection.run_id))
        if not verdicts:
            return detection
        for verdict in reversed(verdicts):
            if corroborates(verdict, detection, self.window):
                self.corroborated += 1
                return corroborated(detection, verdict)
        return detection
