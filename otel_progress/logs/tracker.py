"""Run tracking for log input: :class:`LogRunTracker` (in the run model,
:mod:`otel_progress.runs.logruns`; this module keeps its import path)."""

from __future__ import annotations

from ..runs.logruns import DEFAULT_REORDER_WINDOW, FED_KINDS, LogRun, LogRunTracker, RunEnd

__all__ = ["DEFAULT_REORDER_WINDOW", "FED_KINDS", "LogRun", "LogRunTracker", "RunEnd"]
