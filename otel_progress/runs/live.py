"""The live driver of the run model: spans as they start and end in the application (the
in-process processor), which run each belongs to, and the observations its start and end
make (:class:`~otel_progress.runs.model.RunModel`).

Unlike a replay (:mod:`.replay`), the live driver sees a span's parent when the span
starts, so a tool call knows its agent run, its plan node and whether it is nested in
another tool call before it ends; and it sees the observations in the order they happen,
so nothing is reordered (the engine's own reorder window still orders the calls of one
run by their start). The observations each start and end makes, and the detections they
bring, are :class:`~.livefeed.LiveFeed`'s; what is kept of the spans in flight, in bounded
tables, :class:`~.livetables.LiveTables`'. :class:`RunTracker` decides, for each span, its
kind, its run and plan node, and which observation it makes.

A span's kind may be known only after it started (Google ADK sets
``gen_ai.operation.name`` on its ``invoke_agent`` span just after starting it, and on its
``execute_tool`` spans at their end). The tracker therefore looks at a parent that was
not taken for an agent again when a tool, agent or model span starts under it, and when
a span whose kind appeared late ends under it (the parent is then the current span): a
parent that is an agent by then becomes one, with its own run, and the spans under it
count in that run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..conventions.spans import SpanRecord
from ..engine.config import Config
from ..model import Detection
from .livefeed import Deliver, LiveFeed
from .livetables import AGENT, CLASSIFY_KEYS, MODEL, NO_CTX, OTHER, TOOL, Ctx, Entry, LiveTables, kind_of
from .model import RunModel

__all__ = ["RunTracker"]


class RunTracker:
    """The processor's view of the runs in flight, feeding the run model: which run and
    plan node each span belongs to (at its start, or late when its kind appears late),
    and which observation its start and end make. The tables are a :class:`LiveTables`
    (``spans``, ``roots``, ``traces`` and ``lock`` are its own), the observations a
    :class:`LiveFeed`'s.

    Args:
        model: the run model to feed (its ``on_summary`` hook sees every run that ends).
        config: for ``max_runs`` and ``run_ttl_seconds``.
        max_spans: bound of the open-span tables.
        deliver: see :data:`~.livefeed.Deliver`.
        emit: count a detection and call the hook (detections of runs that end with
            their trace, or of a grouped run that ends).
        evicted: ``evicted(count)`` for runs the engine dropped before they ended.
        on_dead: called (by the garbage collector, on any thread, at any moment: it must
            only queue) with the weak reference of an agent or root span the application
            dropped, to be passed to :meth:`forget` once every span end queued before
            it has been analysed (background analysis: behind the queued ends); None: the
            tracker queues it itself and forgets it at the next span start.
        tool_call: ``tool_call(call, span, attributes)`` for every tool call read
            (``None``: nothing).
        record: ``record(span, attributes)``: the :class:`SpanRecord` of an ended span
            (the adapter's conversion of its span objects).
        attributes: ``attributes(span)``: the current attributes of a span that may still
            be open (looked at for an agent kind set after it started).
    """

    def __init__(self, model: RunModel, config: Config, max_spans: int, deliver: Deliver,
                 emit: Callable[[Detection], None], evicted: Callable[[int], None],
                 tool_call: Callable[[Any, Any, Mapping[str, Any]], None] | None = None,
                 on_dead: Callable[[Any], Any] | None = None, *,
                 record: Callable[[Any, Mapping[str, Any]], SpanRecord],
                 attributes: Callable[[Any], Mapping[str, Any]],
                 model_output: Callable[[int], None] | None = None) -> None:
        self.model = model
        self._attributes = attributes
        self.tables = tables = LiveTables(max_spans, config.max_runs, on_dead)
        self.feed = LiveFeed(model, tables, config, deliver, emit, evicted, tool_call, record, model_output)
        # The tables' own objects (one attribute lookup less on every span).
        self.lock = tables.lock
        self.spans = tables.spans
        self.roots = tables.roots
        self.traces = tables.traces
        self.max_spans = max_spans
        self._dead = tables.dead

    def forget(self, ref: Any) -> None:
        """An agent or root span was dropped by the application (see
        :meth:`LiveTables.forget`)."""
        self.tables.forget(ref)

    def run_span(self, trace_id: int, run_id: str) -> tuple[Any, int | None]:
        """The agent (or root) span of a run, if it is still alive (else None), and its
        span id (None: no such run, or its span is not known)."""
        return self.tables.run_span(trace_id, run_id)

    def root_id(self, trace_id: int) -> int | None:
        """The span id of the trace's open local root span, if known."""
        return self.tables.root_id(trace_id)

    def end_groups(self, idle_before: float | None = None) -> list[Detection]:
        """End the grouped runs last seen before ``idle_before`` (see
        :meth:`LiveFeed.end_groups`; None: all of them, the processor shuts down)."""
        return self.feed.end_groups(idle_before)

    # -- starts -------------------------------------------------------------------------

    def start(self, span: Any, tid: int, sid: int, parent: Any, attrs: Mapping[str, Any], name: str,
              parent_span: Any = None) -> None:
        """A span starts, with these attributes and name: register it if it is a tool,
        agent or model call, or inside a run; remember a local root. ``parent_span``:
        the parent span object, when known (a late agent kind is looked for on it)."""
        if self._dead:
            self.tables.reap()
        plain = CLASSIFY_KEYS.isdisjoint(attrs)
        if parent is None or parent[2]:
            self.tables.add_root(tid, sid, span)
            if plain:
                return
            cp = NO_CTX
        else:
            entry = self.spans.get(parent[1])
            if plain:
                if entry is not None:
                    self.register_plain(sid, entry[0], name)
                return  # outside any run: nothing to remember
            if (entry is None or entry[2] == OTHER) and parent_span is not None:
                entry = self._promote(parent_span, tid, parent[1], entry) or entry
            cp = entry[0] if entry is not None else NO_CTX
        self._start(span, tid, sid, attrs, cp, name)

    def register_plain(self, sid: int, cp: Ctx, name: str) -> None:
        """A plain span starts inside a run (or a tool call), under a parent that passes
        ``cp``: its children get the same, with this span as their plan node."""
        spans = self.spans
        spans[sid] = ((cp[0], name, cp[2]), cp, OTHER)
        if len(spans) > self.max_spans:
            self.tables.trim_spans()

    def _start(self, span: Any, tid: int, sid: int, attrs: Mapping[str, Any], cp: Ctx, name: str) -> None:
        kind = kind_of(attrs)
        if kind == TOOL:
            cs: Ctx = (cp[0], cp[1], True)
            if not cp[2]:
                with self.lock:
                    self.tables.run_for(tid, cp).open_tools += 1
        elif kind == AGENT:
            cs = (self.tables.new_run(span, tid, sid, name, attrs), None, False)
        elif kind == MODEL:
            cs = (cp[0], name, cp[2])
            self.feed.model_start(span, tid, cp)
        else:
            cs = (cp[0], name, cp[2])
        spans = self.spans
        spans[sid] = (cs, cp, kind)
        if len(spans) > self.max_spans:
            self.tables.trim_spans()

    def _promote(self, parent_span: Any, tid: int, psid: int, entry: Entry | None) -> Entry | None:
        """The parent was not taken for an agent when it started: if it is one now, it
        becomes one (its run starts here). Returns its new entry, or None."""
        try:
            if parent_span.get_span_context().span_id != psid:
                return None  # (the current span is not the parent)
        except Exception:
            return None
        attrs = self._attributes(parent_span)
        if CLASSIFY_KEYS.isdisjoint(attrs) or kind_of(attrs) != AGENT:
            return None
        try:
            name = parent_span.name
        except Exception:
            name = ""
        run = self.tables.new_run(parent_span, tid, psid, name or "", attrs)
        new: Entry = ((run, None, False), entry[1] if entry is not None else NO_CTX, AGENT)
        self.spans[psid] = new
        return new

    # -- ends -----------------------------------------------------------------------------

    def end(self, span: Any, tid: int, sid: int, parent: Any, attrs: Mapping[str, Any],
            entry: Entry | None = None, current: Any = None) -> list[Detection] | None:
        """Process an ending span; return the detections that belong on it (``entry``:
        its open-span entry, if the caller took it out of the table already;
        ``current``: the current span where the span ends, when known, looked at for a
        late agent kind)."""
        if entry is None:
            entry = self.spans.pop(sid, None)
        plain = CLASSIFY_KEYS.isdisjoint(attrs)
        root = parent is None or parent[2]
        if plain and (entry is None or entry[2] == OTHER):
            if root and self.roots.pop(tid, None) is not None and tid in self.traces:
                return self.feed.end_root(tid)
            return None
        kind = OTHER if plain else kind_of(attrs)
        if entry is None:
            start_kind = OTHER
            if root:
                cp = NO_CTX
            else:
                pentry = self.spans.get(parent[1])
                if (pentry is None or pentry[2] == OTHER) and current is not None:
                    pentry = self._promote(current, tid, parent[1], pentry) or pentry
                cp = pentry[0] if pentry is not None else NO_CTX
        else:
            cp, start_kind = entry[1], entry[2]
            if kind == OTHER:
                kind = start_kind
        feed = self.feed
        if kind == TOOL:
            mine = feed.end_tool(span, tid, attrs, cp, start_kind == TOOL)
        elif kind == AGENT:
            mine = feed.end_agent(span, tid, sid, parent, cp, start_kind == AGENT)
        elif kind == MODEL:
            mine = feed.end_model(span, tid, sid, attrs, cp, start_kind == MODEL)
        else:
            mine = None
        if root:
            self.roots.pop(tid, None)
            more = feed.end_root(tid)
            if more:
                mine = (mine or []) + more
        return mine
