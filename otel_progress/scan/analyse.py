"""Analysing complete traces, and the rows every summary shows.

:func:`analyse_trace` replays one trace's spans through the engine in time order (the run
model's replay, :mod:`otel_progress.runs.replay`): model calls add their tokens to their run
(and mark the previous tool batch complete; one that marks a compaction is a boundary of
its run, :class:`~otel_progress.conventions.spans.CompactionMarks`), tool calls are observed, agent
invocations end their runs (sub-agents evaluate the run-scope signature). The processor and the
service drive the same model incrementally. :func:`run_rows` turns reports into the rows
of the scan's table and the HTML report.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..conventions.spans import SpanRecord
from ..engine import ProgressEngine
from ..model import Detection
from ..runs.model import RunModel
from ..runs.replay import TraceReport, replay_trace

__all__ = ["RunRow", "TraceReport", "analyse_trace", "run_rows"]


@dataclass(frozen=True)
class RunRow:
    """One agent run as every summary shows it (the scan's table, the HTML report): the
    engine's :class:`RunSummary` figures with the detections actually reported for the
    run (``detections``: both scopes; a run-scope detection belongs to the run the
    sub-agents were invoked from; findings past level 3, which are not reported, are
    not counted)."""

    trace_id: str
    run_id: str
    agent: str | None
    turns: int
    tokens: int
    detections: tuple[Detection, ...]
    first_detection_turn: int | None
    wasted_turns: int
    wasted_tokens: int

    @property
    def level(self) -> int:
        """The highest escalation level reported in the run (0: none)."""
        return max((int(d.level) for d in self.detections), default=0)


def run_rows(reports: Sequence[TraceReport]) -> list[RunRow]:
    """Every run of the reports, in report order, with the detections reported for it.
    A run with detections but no summary (only run-scope detections, on a run without
    tool calls of its own) gets a row with zero turns."""
    rows: list[RunRow] = []
    for rep in reports:
        by_run: dict[str, list[Detection]] = {}
        for d in rep.detections:
            by_run.setdefault(d.run_id, []).append(d)
        seen: set[str] = set()
        for s in rep.runs:
            seen.add(s.run_id)
            dets = tuple(by_run.get(s.run_id, ()))
            first = s.first_detection_turn
            if first is None and dets:
                first = min(d.turn for d in dets)
            rows.append(RunRow(rep.trace_id, s.run_id, s.agent, s.turns, s.tokens, dets, first,
                               s.wasted_turns, s.wasted_tokens))
        for run_id, dets in by_run.items():
            if run_id not in seen:
                rows.append(RunRow(rep.trace_id, run_id, dets[0].agent, 0, 0, tuple(dets),
                                   min(d.turn for d in dets), 0, 0))
    return rows


def analyse_trace(spans: Iterable[SpanRecord], engine: ProgressEngine) -> TraceReport:
    """Run one trace's spans through ``engine`` and free its state afterwards (the run
    model's replay of a whole trace: :func:`otel_progress.runs.replay.replay_trace`).

    The replay follows the in-process processor's view of time, so both give the same
    detections: a tool call is observed when it ends, and its run is flushed when no
    other tool call of the run is still open; a model call flushes its run when it starts
    and adds its tokens when it ends; an agent invocation ends its run when it ends.
    """
    return replay_trace(spans, RunModel(engine))
