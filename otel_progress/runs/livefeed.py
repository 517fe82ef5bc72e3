"""The observations the live driver (:mod:`.live`) makes, fed to the run model, and the
detections they bring handed to the processor.

A tool call is observed when it ends, and its run flushed when no other call of the run
is in flight; a model call flushes its run when it starts and adds its tokens (and any
compaction boundary it marks) and its output (text, reasoning, requested tool calls) when
it ends; an agent span ends its run; a local root span
ends its trace once no agent run of it is open. A grouped run (root tool calls naming a
conversation) ends when idle for ``run_ttl_seconds`` (looked at about once a second, with
the idle traces) or when the processor shuts down.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ..conventions import read_model_output
from ..conventions.spans import (
    CompactionMarks,
    SpanRecord,
    read_input_tokens,
    read_tokens,
    read_tool_call,
    run_group,
)
from ..conventions.verdicts import read_span_verdicts
from ..engine.config import Config
from ..model import Detection
from ..model.verdicts import Verdict
from .groups import IdleGroups
from .identity import span_session
from .livetables import Ctx, LiveTables
from .model import RunModel

__all__ = ["Deliver", "LiveFeed"]

_EVICT_EVERY_SECONDS = 1.0

#: ``deliver(detections, trace id, hex id of the span ending now, event time)``: annotate
#: the runs' open spans, count, call the hook; returns the detections that belong on the
#: span ending now.
Deliver = Callable[[list[Detection], int, str, "int | None"], "list[Detection] | None"]


class LiveFeed:
    """Feeds the run model the observations of the live driver's starts and ends.

    Args:
        model: the run model to feed.
        tables: the live driver's tables (runs, roots, the lock).
        config: for ``run_ttl_seconds``.
        deliver: see :data:`Deliver`.
        emit: count a detection and call the hook (detections of runs that end with
            their trace, or of a grouped run that ends).
        evicted: ``evicted(count)`` for runs the engine dropped before they ended.
        tool_call: ``tool_call(call, span, attributes)`` for every tool call read.
        record: ``record(span, attributes)``: the :class:`SpanRecord` of an ended span.
        model_output: ``model_output(trace id)`` for every model span whose output (text,
            reasoning, requests) was captured: the run can be checked on the model's side.
    """

    def __init__(self, model: RunModel, tables: LiveTables, config: Config, deliver: Deliver,
                 emit: Callable[[Detection], None], evicted: Callable[[int], None],
                 tool_call: Callable[[Any, Any, Mapping[str, Any]], None] | None,
                 record: Callable[[Any, Mapping[str, Any]], SpanRecord],
                 model_output: Callable[[int], None] | None = None) -> None:
        self.model = model
        self.engine = model.engine
        self.tables = tables
        self.groups = IdleGroups(model)
        self._ttl = config.run_ttl_seconds
        self._deliver = deliver
        self._emit = emit
        self._evicted = evicted
        self._tool_call = tool_call
        self._record = record
        self._model_output = model_output
        self._next_evict = 0.0
        self._compactions = CompactionMarks()  # compaction boundaries, from the runs' model spans

    def model_start(self, span: Any, tid: int, cp: Ctx) -> None:
        """A model call starts: the previous tool batch of its run is complete."""
        run_hex = cp[0].hex if cp[0] is not None else ""
        dets = self.model.reported(self.model.flush(format(tid, "032x"), run_hex))
        if dets:
            self._deliver(dets, tid, "", span.start_time)

    def end_tool(self, span: Any, tid: int, attrs: Mapping[str, Any], cp: Ctx,
                 counted: bool) -> list[Detection] | None:
        """A tool call ended (``counted``: its start was counted in flight)."""
        if cp[2]:
            return None  # nested in another tool call: counted once, as the outer call
        rec = self._record(span, attrs)
        with self.tables.lock:
            run = self.tables.run_for(tid, cp)
            if counted:
                run.open_tools -= 1
            # A root tool call outside any agent: the run of the conversation it names.
            group = run_group(rec) if not run.hex else None
            call = read_tool_call(rec, run_id=run.hex, agent=run.agent, node=cp[1], trace_key=group)
            model = self.model
            if rec.events:
                self._keep_verdicts(read_span_verdicts(rec), group or rec.trace_id, "" if group else run.hex)
            dets = model.reported(model.tool(call, flush=group is not None or run.open_tools <= 0,
                                             session=span_session(attrs)))
            if group is not None:
                self.groups.seen(group, time.monotonic())
                if dets:
                    dets = [replace(d, trace_id=rec.trace_id) for d in dets]
                    model.tag_all(dets, span_session(attrs))
            more = self._maybe_evict()
        for det in more:
            self._emit(det)
        if self._tool_call is not None:
            self._tool_call(call, span, attrs)
        if not dets:
            return None
        return self._deliver(dets, tid, rec.span_id, span.end_time)

    def end_model(self, span: Any, tid: int, sid: int, attrs: Mapping[str, Any], cp: Ctx,
                  flushed: bool) -> list[Detection] | None:
        """A model call ended (``flushed``: its start flushed its run)."""
        trace_hex = format(tid, "032x")
        run_hex = cp[0].hex if cp[0] is not None else ""
        if getattr(span, "events", None):
            self.verdicts(self._record(span, attrs), trace_hex, run_hex)
        dets = [] if flushed else self.model.flush(trace_hex, run_hex)
        events = getattr(span, "events", None)
        record = SpanRecord(trace_hex, format(sid, "016x"), name=getattr(span, "name", "") or "", attributes=attrs,
                            start_ns=getattr(span, "start_time", 0) or 0, end_ns=getattr(span, "end_time", 0) or 0,
                            events=tuple((e.name, e.attributes) for e in events) if events else ())
        with self.tables.lock:
            compaction = self._compactions.at(record, trace_hex, run_hex, cp[0].agent if cp[0] is not None else None)
        if compaction is not None:
            dets = [*dets, *self.model.compaction(compaction)]
        dets = self.model.reported(dets)
        tokens, input_tokens = read_tokens(record), read_input_tokens(record)
        if tokens > 0 or input_tokens > 0:
            with self.tables.lock:
                self.tables.trace(tid)  # so that the trace's end frees the engine's state
                self.model.tokens(trace_hex, run_hex, tokens, input_tokens)
        if not cp[2]:  # (a model call nested in a tool call is the tool's, not a step of the run)
            output = read_model_output(record, run_id=run_hex, agent=cp[0].agent if cp[0] is not None else None)
            if output is not None:
                with self.tables.lock:
                    self.tables.trace(tid)
                    more = self.model.model_output(output)
                if more:
                    dets = [*dets, *self.model.reported(more)]
                if self._model_output is not None and output.captured:
                    self._model_output(tid)
        if not dets:
            return None
        return self._deliver(dets, tid, format(sid, "016x"), span.end_time)

    def end_agent(self, span: Any, tid: int, sid: int, parent: Any, cp: Ctx,
                  started_as_agent: bool) -> list[Detection] | None:
        """An agent span ended: its run ends (and its trace, if its local root ended)."""
        sid_hex = format(sid, "016x")
        trace_hex = format(tid, "032x")
        parent_run = cp[0].hex if cp[0] is not None else ""
        if getattr(span, "events", None):
            self.verdicts(self._record(span, getattr(span, "attributes", None) or {}), trace_hex, sid_hex)
        with self.tables.lock:
            dets, _summary = self.model.end_run(trace_hex, sid_hex, span_id=sid_hex, parent_run=parent_run,
                                                conversation=span_session(span.attributes or {}))
        dets = self.model.reported(dets)
        mine = self._deliver(dets, tid, sid_hex, span.end_time) if dets else None
        with self.tables.lock:
            # the last agent run of a trace whose local root already ended: end the trace
            orphan = self.tables.close_agent(tid, sid_hex, started_as_agent) and not (parent is None or parent[2])
        if orphan:
            more = self.end_root(tid)
            if more:
                mine = (mine or []) + more
        return mine

    def end_root(self, tid: int) -> list[Detection] | None:
        """The trace's local root span ended: end its runs if no agent run is still open."""
        with self.tables.lock:
            trace = self.tables.pop_done(tid)
            if trace is None:
                return None
            dets, _summaries = self.model.end_trace(trace.hex)
        dets = self.model.reported(dets)
        for det in dets:
            self._emit(det)
        # Their runs are over: the ending root span is where they can still be seen.
        return dets or None

    def verdicts(self, record: SpanRecord, trace: str, run: str) -> None:
        """Keep the other detectors' verdicts in an ended span's events with their run
        (before what the span completes: its events happened before its end)."""
        verdicts = read_span_verdicts(record)
        if verdicts:
            with self.tables.lock:
                self._keep_verdicts(verdicts, trace, run)

    def _keep_verdicts(self, verdicts: list[Verdict], trace: str, run: str) -> None:
        """(lock held)"""
        for verdict in verdicts:
            self.model.verdict(verdict, trace, run)

    def end_groups(self, idle_before: float | None = None) -> list[Detection]:
        """End the grouped runs last seen before ``idle_before`` (monotonic; None: all of
        them: the processor shuts down), through the run model (summarised like any run).
        Returns their last detections, which belong on no open span (lock held by the
        caller, or not needed)."""
        return self.groups.end_idle(idle_before)

    def _maybe_evict(self) -> list[Detection]:
        """End idle grouped runs, drop idle traces here and in the engine (lock held);
        returns the grouped runs' last detections (to emit)."""
        now = time.monotonic()
        if now < self._next_evict:
            self._report_evictions()
            return []
        self._next_evict = now + _EVICT_EVERY_SECONDS
        limit = now - self._ttl
        ended = self.end_groups(idle_before=limit) if self.groups else []
        self.engine.evict_idle(now)
        self.tables.drop_idle(limit)
        self._report_evictions()
        return ended

    def _report_evictions(self) -> None:
        """Count the runs the engine dropped since the last report (lock held)."""
        evicted = self.model.evictions()
        if evicted:
            self._evicted(evicted)
