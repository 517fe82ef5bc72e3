"""Causal order where the clock cannot order spans: start times in whole milliseconds.

The OpenTelemetry JavaScript SDK stamps a span's start with ``Date.now()`` (whole
milliseconds) and its end as that start plus a precise duration, so within a millisecond
neither the starts nor the ends of two spans say which came first: a model call, the tool
call it requested and the next model call, given that call's result, often all start in
the same millisecond, and the replay (:mod:`.replay`) would order them by span id, at
random, and cut the run into other steps.

The tool-call ids order them instead (:func:`~otel_progress.conventions.read_call_links`):
a tool call starts after the model call that requested it (at the same instant, after it),
and a model call starts after every tool call whose result it was given (at that call's
end); a span moved keeps its duration, and never leaves the millisecond it was stamped in.
:func:`causal_times` gives the corrected times of the spans that need them; every other
span keeps its own. It only looks at a model span whose start is a whole millisecond with
a tool span starting or ending within that millisecond, and reads call ids only then, so
spans from a clock with finer resolution (the Python SDK's ``time_ns``) cost a modulo and a
binary search each.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import NamedTuple

from ..conventions import read_call_links
from ..conventions.spans import SpanKind, SpanRecord

__all__ = ["MILLISECOND", "Times", "causal_times"]

MILLISECOND = 1_000_000


class Times(NamedTuple):
    """A span's replay times (ns); ``caused``: it starts after another span that starts at
    the same instant (the model call that requested it)."""

    start: int
    end: int
    caused: bool = False


def causal_times(spans: Sequence[tuple[SpanRecord, SpanKind]]) -> dict[str, Times]:
    """The corrected times of the spans whose clock cannot order them, by span id (empty:
    every span keeps its own times)."""
    tools = [span for span, kind in spans if kind is SpanKind.TOOL]
    models = [span for span, kind in spans if kind is SpanKind.MODEL and span.start_ns % MILLISECOND == 0]
    if not tools or not models:
        return {}
    ambiguous = _ambiguous(models, tools)
    if not ambiguous:
        return {}
    by_call = {}
    for tool in tools:
        own = read_call_links(tool).own
        if own is not None:
            by_call[own] = tool
    if not by_call:
        return {}
    return _corrected(ambiguous, by_call)


def _ambiguous(models: list[SpanRecord], tools: list[SpanRecord]) -> list[SpanRecord]:
    """The model spans with a tool span starting or ending within their start's millisecond."""
    instants = sorted([t.start_ns for t in tools] + [t.end_ns for t in tools])
    out = []
    for model in models:
        i = bisect.bisect_left(instants, model.start_ns)
        if i < len(instants) and instants[i] < model.start_ns + MILLISECOND:
            out.append(model)
    return out


def _corrected(ambiguous: list[SpanRecord], by_call: dict[str, SpanRecord]) -> dict[str, Times]:
    start: dict[str, int] = {}
    end: dict[str, int] = {}
    caused: set[str] = set()
    seen: list[tuple[SpanRecord, list[SpanRecord]]] = []
    requested: list[tuple[SpanRecord, SpanRecord]] = []  # (model, tool it requested)
    for model in ambiguous:
        links = read_call_links(model)
        given = [by_call[c] for c in links.seen if c in by_call]
        if given:
            seen.append((model, given))
        requested.extend((model, by_call[c]) for c in links.produced if c in by_call)
    if not seen and not requested:
        return {}

    def times(span: SpanRecord) -> tuple[int, int]:
        return start.get(span.span_id, span.start_ns), end.get(span.span_id, span.end_ns)

    def move(span: SpanRecord, to: int) -> bool:
        # Its end moves with it: the clock's error is the same at both ends. A true start
        # lies within the millisecond stamped, and so does every time derived from call ids
        # (each is a lower bound of a true time); further is a wrong id (a reused one).
        to = min(to, span.start_ns + MILLISECOND - 1)
        if to <= times(span)[0]:
            return False
        start[span.span_id] = to
        end[span.span_id] = span.end_ns + (to - span.start_ns)
        return True

    # A chain of steps within one millisecond moves one link per pass.
    for _ in range(len(seen) + len(requested) + 1):
        changed = False
        for model, given in seen:
            changed |= move(model, max(times(tool)[1] for tool in given))
        for model, tool in requested:
            at = times(model)[0]
            if at == times(tool)[0] and tool.span_id not in caused:
                start.setdefault(tool.span_id, tool.start_ns)
                end.setdefault(tool.span_id, tool.end_ns)
                caused.add(tool.span_id)
                changed = True
            elif move(tool, at):
                caused.add(tool.span_id)
                changed = True
        if not changed:
            break
    return {sid: Times(start[sid], end[sid], sid in caused) for sid in start}
