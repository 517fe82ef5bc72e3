"""Grouped runs read after the fact: root tool calls of one conversation across traces.

A tool span without an agent span and without a parent belongs to the run of the
conversation or session it names (see :mod:`otel_progress.conventions.grouping`), which
spans as many traces as it has calls. A scan reads those traces in any order, so
:class:`HeldGroups` holds each grouped run's calls until the input ends and then replays
them in time order (within ``max_calls``: past it the earliest held calls of the largest
run are fed to the engine at once, in order), so the detections do not depend on the
order of the documents. A call read twice (its trace analysed again) is held once.

The drivers that stream (the processor, serve) feed a grouped run's calls as they come and
end it when it has been idle for the engine's ``run_ttl_seconds`` (or at shutdown):
:class:`IdleGroups`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import replace

from ..conventions.spans import SpanRecord
from ..engine import RunSummary
from ..model import Detection, ToolCall
from .identity import span_session
from .model import RunModel

__all__ = ["HeldGroups", "IdleGroups"]

_ORDER = lambda c: (c.start_ns, c.end_ns, c.span_id)  # noqa: E731 (the engine's order of calls)


class HeldGroups:
    """The calls of grouped runs, held until :meth:`finish` (see the module docstring)."""

    def __init__(self, model: RunModel, max_calls: int = 200_000) -> None:
        self.model = model
        self.max_calls = max_calls
        # group key -> span id -> (call, its agent session, its real trace id)
        self._calls: dict[str, dict[str, tuple[ToolCall, str | None, str]]] = {}
        self._held = 0
        self._early: dict[str, list[Detection]] = {}  # detections of calls fed past the bound
        self._trace_of: dict[str, tuple[str, str | None]] = {}  # span id of a call fed -> (real trace, session)

    def __len__(self) -> int:
        return self._held

    def add(self, key: str, call: ToolCall, span: SpanRecord) -> list[Detection]:
        """Hold one root tool call of the grouped run ``key``; returns ``[]`` (its
        detections come at :meth:`finish`)."""
        calls = self._calls.setdefault(key, {})
        if call.span_id not in calls:
            self._held += 1
        calls[call.span_id] = (call, span_session(span.attributes), span.trace_id)
        if self._held > self.max_calls:
            self._feed_some()
        return []

    def _feed_some(self) -> None:
        """Past the bound: feed the earlier half of the largest run's calls, in order."""
        key = max(self._calls, key=lambda k: len(self._calls[k]))
        calls = self._calls[key]
        ordered = sorted(calls.values(), key=lambda v: _ORDER(v[0]))
        for entry in ordered[: max(1, len(ordered) // 2)]:
            del calls[entry[0].span_id]
            self._held -= 1
            self._early.setdefault(key, []).extend(self._feed(entry))

    def _feed(self, entry: tuple[ToolCall, str | None, str]) -> list[Detection]:
        call, session, trace_id = entry
        self._trace_of[call.span_id] = (trace_id, session)
        return self.model.tool(call, flush=True, session=session)

    def finish(self) -> Iterator[tuple[str, list[Detection], list[RunSummary]]]:
        """The input is over: replay each grouped run's calls in time order and end it;
        yields ``(key, detections, summaries)`` per run, the detections placed on their
        real traces."""
        model = self.model
        for key in sorted(set(self._calls) | set(self._early)):
            dets = self._early.pop(key, [])
            calls = self._calls.pop(key, {})
            for entry in sorted(calls.values(), key=lambda v: _ORDER(v[0])):
                dets.extend(self._feed(entry))
            ended, summaries = model.end_trace(key)
            dets.extend(ended)
            self._held -= len(calls)
            placed = []
            for det in dets:
                trace_id, session = self._trace_of.get(det.span_id, (det.trace_id, None))
                placed.append(replace(det, trace_id=trace_id))
                model.tag_all(placed[-1:], session)
            yield key, placed, summaries
        self._trace_of.clear()


class IdleGroups:
    """The grouped runs a streaming driver has fed, with when each was last seen (least
    recently first), ended through the run model when idle (summarised like any run)."""

    def __init__(self, model: RunModel) -> None:
        self.model = model
        self._seen: OrderedDict[str, float] = OrderedDict()  # engine trace key -> last seen

    def __len__(self) -> int:
        return len(self._seen)

    def seen(self, key: str, now: float) -> None:
        """A call of the grouped run ``key`` was fed at ``now``."""
        self._seen[key] = now
        self._seen.move_to_end(key)

    def end_idle(self, idle_before: float | None = None) -> list[Detection]:
        """End the grouped runs last seen at or before ``idle_before`` (None: all of them);
        returns their last detections (those reported: :meth:`RunModel.reported`)."""
        out: list[Detection] = []
        groups = self._seen
        while groups:
            key, seen = next(iter(groups.items()))
            if idle_before is not None and seen > idle_before:
                break
            del groups[key]
            dets, _summaries = self.model.end_trace(key)
            out.extend(self.model.reported(dets))
        return out

    def open_keys(self) -> list[str]:
        """The open grouped runs' keys, the most recently seen first."""
        return list(reversed(self._seen))

    def last_seen(self, key: str) -> float | None:
        """When a call of the grouped run ``key`` was last fed (None: not open here)."""
        return self._seen.get(key)

    def adopt(self, key: str, seen: float) -> None:
        """Continue the grouped run ``key`` (its engine state adopted), last seen at ``seen``."""
        groups = self._seen
        groups.pop(key, None)
        in_order = not groups or next(reversed(groups.values())) <= seen
        groups[key] = seen
        if not in_order:  # (kept least recently seen first: end_idle stops at the first one not idle)
            self._seen = OrderedDict(sorted(groups.items(), key=lambda kv: kv[1]))
