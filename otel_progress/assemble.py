"""Grouping streamed spans into complete traces, for ``otel-progress scan``:
:class:`TraceAssembler` (in the run model, :mod:`otel_progress.runs.assembly`; this module
keeps its import path)."""

from __future__ import annotations

from .runs.assembly import AssembledTrace, TraceAssembler

__all__ = ["AssembledTrace", "TraceAssembler"]
