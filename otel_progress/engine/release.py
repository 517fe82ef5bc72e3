"""The release of a run's buffered tool calls as complete steps (:class:`StepRelease`):
calls wait in the run's reorder buffer (``RunState.pending``, in start order) until their
step is known to be complete; parallel calls from one model response (same parent,
overlapping in time) are one step. Used by :class:`~otel_progress.engine.ProgressEngine`
under its lock.
"""

from __future__ import annotations

import logging

from ..model import Detection, ToolCall
from .config import Config
from .pipeline import Pipeline
from .runstate import RunState
from .summary import EngineStats

__all__ = ["StepRelease"]

_log = logging.getLogger("otel_progress.engine")


class StepRelease:
    """Evaluates a run's buffered calls as steps, counting them in ``stats``."""

    __slots__ = ("config", "pipeline", "stats")

    def __init__(self, config: Config, pipeline: Pipeline, stats: EngineStats) -> None:
        self.config = config
        self.pipeline = pipeline
        self.stats = stats

    def release(self, run: RunState, final: bool) -> list[Detection]:
        """Evaluate the complete steps at the head of the run's buffer: all of them when
        ``final``, else while it holds more than ``reorder_window`` calls. The buffer is
        already in start order (``observe`` keeps it sorted)."""
        pending = run.pending
        limit = self.config.reorder_window
        out: list[Detection] = []
        while pending and (final or len(pending) > limit):
            head = pending[0]
            i = 1
            if len(pending) > 1:
                end = head.end_ns
                while i < len(pending) and pending[i].start_ns < end and pending[i].parent_id == head.parent_id:
                    end = max(end, pending[i].end_ns)
                    i += 1
            group = pending[:i]
            del pending[:i]
            out.extend(self.evaluate(run, group))
        return out

    def release_before(self, run: RunState, time_ns: int) -> list[Detection]:
        """Evaluate the buffered calls of the run that started at or before ``time_ns`` (all
        of them when it is 0: unknown), as complete steps; later ones stay buffered."""
        pending = run.pending
        cut = len(pending)
        if time_ns:
            cut = 0
            while cut < len(pending) and pending[cut].start_ns <= time_ns:
                cut += 1
        if not cut:
            return []
        later = pending[cut:]
        del pending[cut:]
        out = self.release(run, final=True)
        pending.extend(later)
        return out

    def evaluate(self, run: RunState, group: list[ToolCall]) -> list[Detection]:
        """Evaluate one complete step (its calls in start order); its detection, if any."""
        head = group[0]
        if head.start_ns > run.watermark_ns:
            run.watermark_ns = head.start_ns
        for call in group:
            if call.node:
                run.trace.plan_node = call.node
        self.stats.steps += 1
        before = run.detections
        try:
            det = self.pipeline.run_step(run, group)
        except Exception:  # a bug in a signal must not lose the rest of the run
            self.stats.errors += 1
            _log.debug("otel-progress: step evaluation failed", exc_info=True)
            det = None
        if det is not None:
            self.stats.detections += 1
            return [det]
        if run.detections > before:
            self.stats.suppressed += 1
        return []
