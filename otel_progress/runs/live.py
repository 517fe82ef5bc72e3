"""The live driver of the run model: spans as they start and end in the application (the
in-process processor), which run each belongs to, and the observations its start and end
make (:class:`~otel_progress.runs.model.RunModel`).

Unlike a replay (:mod:`.replay`), the live driver sees a span's parent when the span
starts, so a tool call knows its agent run, its plan node and whether it is nested in
another tool call before it ends; and it sees the observations in the order they happen,
so nothing is reordered (the engine's own reorder window still orders the calls of one
run by their start). A tool call is observed when it ends, and its run flushed when no
other call of the run is in flight; a model call flushes its run when it starts and adds
its tokens when it ends; an agent span ends its run; a local root span ends its trace
once no agent run of it is open. A grouped run (root tool calls naming a conversation)
ends when idle for ``run_ttl_seconds`` or when the processor shuts down, summarised like
any run.

The tracker keeps, while spans are open, what the analysis needs of them and nothing
more: ids, kind, the plan node's name and the run they belong to (never the span
object: an agent or root span is referenced weakly, for its live annotation only, so a
span the application drops without ending it is freed as it would be without the
processor). Every table is bounded:

* ``spans``: open spans inside a run or a tool call (``max_spans``; the oldest tenth is
  forgotten when it is full);
* ``roots``: open local root spans, one per trace (``max_spans``, the same way);
* ``traces``: traces with run state (``max_runs``, least recently used first; idle ones
  are dropped after ``run_ttl_seconds``).

A span's kind may be known only after it started (Google ADK sets
``gen_ai.operation.name`` on its ``invoke_agent`` span just after starting it, and on its
``execute_tool`` spans at their end). The tracker therefore looks at a parent that was
not taken for an agent again when a tool, agent or model span starts under it, and when
a span whose kind appeared late ends under it (the parent is then the current span): a
parent that is an agent by then becomes one, with its own run, and the spans under it
count in that run.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import replace
from itertools import islice
from typing import Any

from ..conventions import MARKER_KEYS
from ..conventions.spans import (
    CompactionMarks,
    SpanKind,
    SpanRecord,
    agent_name,
    classify,
    read_tokens,
    read_tool_call,
    run_group,
)
from ..engine.config import Config
from ..model import Detection
from .identity import span_session
from .model import RunModel

__all__ = ["AGENT", "CLASSIFY_KEYS", "MODEL", "NO_CTX", "OTHER", "TOOL", "Ctx", "Run", "RunTracker", "kind_of"]

OTHER, TOOL, AGENT, MODEL = 0, 1, 2, 3
_KIND_CODE = {SpanKind.OTHER: OTHER, SpanKind.TOOL: TOOL, SpanKind.AGENT: AGENT, SpanKind.MODEL: MODEL}
#: Every attribute :func:`~otel_progress.conventions.spans.classify` consults: a span with none of
#: them is "other" (a plain span), decided with one set operation.
CLASSIFY_KEYS = MARKER_KEYS  # the span conventions' marker keys: one list for every fast path
#: What a span passes to its children: (run, plan node, inside a tool call).
Ctx = tuple[Any, "str | None", bool]
NO_CTX: Ctx = (None, None, False)
#: An open span's entry: (ctx for its children, ctx from its parent, kind at start).
Entry = tuple[Ctx, Ctx, int]
_EVICT_EVERY_SECONDS = 1.0
_NO_SPAN: Callable[[], Any] = lambda: None  # noqa: E731 (a dead weak reference)

#: ``deliver(detections, trace id, hex id of the span ending now, event time)``: annotate
#: the runs' open spans, count, call the hook; returns the detections that belong on the
#: span ending now.
Deliver = Callable[[list[Detection], int, str, "int | None"], "list[Detection] | None"]


def kind_of(attrs: Mapping[str, Any]) -> int:
    """The span kind code of these attributes."""
    if CLASSIFY_KEYS.isdisjoint(attrs):
        return OTHER
    return _KIND_CODE[classify(SpanRecord("", "", attributes=attrs))]


class _SpanRef(weakref.ref):  # type: ignore[type-arg]
    """A weak reference to an agent or root span with its ids (one per span, shared by
    its root and run entries): when the application drops the span without ending it,
    the entries are forgotten (see forget)."""

    __slots__ = ("sid", "tid")

    def __new__(cls, span: Any, callback: Callable[[Any], Any], tid: int, sid: int) -> _SpanRef:
        self = super().__new__(cls, span, callback)
        self.tid, self.sid = tid, sid
        return self

    def __init__(self, span: Any, callback: Callable[[Any], Any], tid: int, sid: int) -> None:
        super().__init__(span, callback)


class _StrongRef:
    """For a span type without weak references: the span, held while it is open."""

    __slots__ = ("sid", "span", "tid")

    def __init__(self, span: Any, tid: int, sid: int) -> None:
        self.span, self.tid, self.sid = span, tid, sid

    def __call__(self) -> Any:
        return self.span


class Run:
    """One agent run (or a trace's calls outside any agent): what the tracker keeps."""

    __slots__ = ("agent", "hex", "open_tools", "span", "span_id")

    def __init__(self, hex_id: str, agent: str | None, span: Callable[[], Any], span_id: int | None) -> None:
        self.hex = hex_id
        self.agent = agent
        self.span = span  # a weak reference to the agent (or root) span
        self.span_id = span_id  # its id (None: not known)
        self.open_tools = 0


class _Trace:
    __slots__ = ("hex", "last_seen", "open_agents", "runs")

    def __init__(self, hex_id: str, now: float) -> None:
        self.hex = hex_id
        self.runs: dict[str, Run] = {}
        self.open_agents = 0
        self.last_seen = now


class RunTracker:
    """The processor's view of the runs in flight, feeding the run model.

    Args:
        model: the run model to feed (its ``on_summary`` hook sees every run that ends).
        config: for ``max_runs`` and ``run_ttl_seconds``.
        max_spans: bound of the open-span tables.
        deliver: see :data:`Deliver`.
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
                 attributes: Callable[[Any], Mapping[str, Any]]) -> None:
        self.model = model
        self._record = record
        self._attributes = attributes
        self.engine = model.engine
        self.lock = threading.Lock()
        self.spans: dict[int, Entry] = {}
        # trace id -> (its open local root span, weakly; the root's span id)
        self.roots: dict[int, Any] = {}  # (the root's _SpanRef: the span weakly, its ids)
        self.traces: OrderedDict[int, _Trace] = OrderedDict()
        # grouped runs (engine trace key -> when last seen, monotonic), least recently first
        self.groups: OrderedDict[str, float] = OrderedDict()
        self.max_spans = max_spans
        self._max_runs = config.max_runs
        self._ttl = config.run_ttl_seconds
        self._deliver = deliver
        self._emit = emit
        self._evicted = evicted
        self._tool_call = tool_call
        self._next_evict = 0.0
        self._compactions = CompactionMarks()  # compaction boundaries, from the runs' model spans
        # Agent and root spans the application dropped (their weak references died),
        # appended by the garbage collector's callback (any thread, any moment: it only
        # appends) and forgotten by reap() at the next start.
        self._dead: deque[_SpanRef] = deque()
        self._on_dead = on_dead if on_dead is not None else self._dead.append

    def _ref(self, span: Any, tid: int, sid: int) -> Any:
        root = self.roots.get(tid)
        if root is not None and root.sid == sid:
            return root  # an agent span that is its trace's local root: one reference
        try:
            return _SpanRef(span, self._on_dead, tid, sid)
        except TypeError:  # a span type without weak references: hold it while it is open
            return _StrongRef(span, tid, sid)

    def reap(self) -> None:
        """Forget the agent and root spans the application dropped since the last call."""
        dead = self._dead
        while dead:
            try:
                ref = dead.popleft()
            except IndexError:
                return
            self.forget(ref)

    def forget(self, ref: Any) -> None:
        """An agent or root span was dropped by the application: if its entries are still
        here, it never ended (the entries of a span that ended are gone already, provided
        its end was processed before this call), and they are forgotten."""
        if self.roots.get(ref.tid) is ref:
            self.roots.pop(ref.tid, None)
        entry = self.spans.get(ref.sid)
        if entry is not None and entry[2] == AGENT and entry[0][0].span is ref:
            self.spans.pop(ref.sid, None)
        with self.lock:
            trace = self.traces.get(ref.tid)
            run = trace.runs.get(format(ref.sid, "016x")) if trace is not None else None
            if trace is not None and run is not None and run.span is ref:
                del trace.runs[run.hex]
                trace.open_agents -= 1

    # -- lookups ----------------------------------------------------------------------

    def run_span(self, trace_id: int, run_id: str) -> tuple[Any, int | None]:
        """The agent (or root) span of a run, if it is still alive (else None), and its
        span id (None: no such run, or its span is not known)."""
        with self.lock:
            trace = self.traces.get(trace_id)
            run = trace.runs.get(run_id) if trace is not None else None
        if run is None:
            return None, None
        return run.span(), run.span_id

    def root_id(self, trace_id: int) -> int | None:
        """The span id of the trace's open local root span, if known."""
        root = self.roots.get(trace_id)
        return root.sid if root is not None else None

    # -- starts -------------------------------------------------------------------------

    def start(self, span: Any, tid: int, sid: int, parent: Any, attrs: Mapping[str, Any], name: str,
              parent_span: Any = None) -> None:
        """A span starts, with these attributes and name: register it if it is a tool,
        agent or model call, or inside a run; remember a local root. ``parent_span``:
        the parent span object, when known (a late agent kind is looked for on it)."""
        if self._dead:
            self.reap()
        plain = CLASSIFY_KEYS.isdisjoint(attrs)
        if parent is None or parent[2]:
            self.add_root(tid, sid, span)
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

    def add_root(self, tid: int, sid: int, span: Any) -> None:
        roots = self.roots
        roots.pop(tid, None)  # (a new root of the trace: its own reference)
        roots[tid] = self._ref(span, tid, sid)
        if len(roots) > self.max_spans:
            _trim(roots, self.max_spans)

    def register_plain(self, sid: int, cp: Ctx, name: str) -> None:
        """A plain span starts inside a run (or a tool call), under a parent that passes
        ``cp``: its children get the same, with this span as their plan node."""
        spans = self.spans
        spans[sid] = ((cp[0], name, cp[2]), cp, OTHER)
        if len(spans) > self.max_spans:
            self._trim_spans()

    def _start(self, span: Any, tid: int, sid: int, attrs: Mapping[str, Any], cp: Ctx, name: str) -> None:
        kind = kind_of(attrs)
        if kind == TOOL:
            cs: Ctx = (cp[0], cp[1], True)
            if not cp[2]:
                with self.lock:
                    self._run_for(tid, cp).open_tools += 1
        elif kind == AGENT:
            cs = (self._new_run(span, tid, sid, name, attrs), None, False)
        elif kind == MODEL:  # the previous tool batch of its run is complete
            cs = (cp[0], name, cp[2])
            run_hex = cp[0].hex if cp[0] is not None else ""
            dets = self.model.reported(self.model.flush(format(tid, "032x"), run_hex))
            if dets:
                self._deliver(dets, tid, "", span.start_time)
        else:
            cs = (cp[0], name, cp[2])
        spans = self.spans
        spans[sid] = (cs, cp, kind)
        if len(spans) > self.max_spans:
            self._trim_spans()

    def _new_run(self, span: Any, tid: int, sid: int, name: str, attrs: Mapping[str, Any]) -> Run:
        run = Run(format(sid, "016x"), agent_name(SpanRecord("", "", name=name, attributes=attrs)),
                  self._ref(span, tid, sid), sid)
        with self.lock:
            trace = self._trace(tid)
            trace.runs[run.hex] = run
            trace.open_agents += 1
        return run

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
        run = self._new_run(parent_span, tid, psid, name or "", attrs)
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
                return self._end_root(tid)
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
        if kind == TOOL:
            mine = self._end_tool(span, tid, attrs, cp, start_kind == TOOL)
        elif kind == AGENT:
            mine = self._end_agent(span, tid, sid, parent, cp, start_kind == AGENT)
        elif kind == MODEL:
            mine = self._end_model(span, tid, sid, attrs, cp, start_kind == MODEL)
        else:
            mine = None
        if root:
            self.roots.pop(tid, None)
            more = self._end_root(tid)
            if more:
                mine = (mine or []) + more
        return mine

    def _end_tool(self, span: Any, tid: int, attrs: Mapping[str, Any], cp: Ctx,
                  counted: bool) -> list[Detection] | None:
        if cp[2]:
            return None  # nested in another tool call: counted once, as the outer call
        rec = self._record(span, attrs)
        with self.lock:
            run = self._run_for(tid, cp)
            if counted:
                run.open_tools -= 1
            # A root tool call outside any agent: the run of the conversation it names.
            group = run_group(rec) if not run.hex else None
            call = read_tool_call(rec, run_id=run.hex, agent=run.agent, node=cp[1], trace_key=group)
            model = self.model
            dets = model.reported(model.tool(call, flush=group is not None or run.open_tools <= 0,
                                             session=span_session(attrs)))
            if group is not None:
                self.groups[group] = time.monotonic()
                self.groups.move_to_end(group)
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

    def _end_model(self, span: Any, tid: int, sid: int, attrs: Mapping[str, Any], cp: Ctx,
                   flushed: bool) -> list[Detection] | None:
        trace_hex = format(tid, "032x")
        run_hex = cp[0].hex if cp[0] is not None else ""
        dets = [] if flushed else self.model.flush(trace_hex, run_hex)
        record = SpanRecord(trace_hex, format(sid, "016x"), name=getattr(span, "name", "") or "", attributes=attrs,
                            start_ns=getattr(span, "start_time", 0) or 0)
        with self.lock:
            compaction = self._compactions.at(record, trace_hex, run_hex, cp[0].agent if cp[0] is not None else None)
        if compaction is not None:
            dets = [*dets, *self.model.compaction(compaction)]
        dets = self.model.reported(dets)
        tokens = read_tokens(record)
        if tokens > 0:
            with self.lock:
                self._trace(tid)  # so that the trace's end frees the engine's state
                self.model.tokens(trace_hex, run_hex, tokens)
        if not dets:
            return None
        return self._deliver(dets, tid, format(sid, "016x"), span.end_time)

    def _end_agent(self, span: Any, tid: int, sid: int, parent: Any, cp: Ctx,
                   started_as_agent: bool) -> list[Detection] | None:
        sid_hex = format(sid, "016x")
        trace_hex = format(tid, "032x")
        parent_run = cp[0].hex if cp[0] is not None else ""
        with self.lock:
            dets, _summary = self.model.end_run(trace_hex, sid_hex, span_id=sid_hex, parent_run=parent_run)
        dets = self.model.reported(dets)
        mine = self._deliver(dets, tid, sid_hex, span.end_time) if dets else None
        with self.lock:
            trace = self.traces.get(tid)
            if trace is not None and started_as_agent and trace.runs.pop(sid_hex, None) is not None:
                trace.open_agents -= 1
            # the last agent run of a trace whose local root already ended: end the trace
            orphan = (trace is not None and trace.open_agents <= 0 and tid not in self.roots
                      and not (parent is None or parent[2]))
        if orphan:
            more = self._end_root(tid)
            if more:
                mine = (mine or []) + more
        return mine

    def _end_root(self, tid: int) -> list[Detection] | None:
        """The trace's local root span ended: end its runs if no agent run is still open."""
        with self.lock:
            trace = self.traces.get(tid)
            if trace is None or trace.open_agents > 0:
                return None
            del self.traces[tid]
            dets, _summaries = self.model.end_trace(trace.hex)
        dets = self.model.reported(dets)
        for det in dets:
            self._emit(det)
        # Their runs are over: the ending root span is where they can still be seen.
        return dets or None

    def end_groups(self, idle_before: float | None = None) -> list[Detection]:
        """End the grouped runs last seen before ``idle_before`` (monotonic; None: all of
        them: the processor shuts down), through the run model (summarised like any run).
        Returns their last detections, which belong on no open span (lock held by the
        caller, or not needed)."""
        out: list[Detection] = []
        groups = self.groups
        while groups:
            key, seen = next(iter(groups.items()))
            if idle_before is not None and seen > idle_before:
                break
            del groups[key]
            dets, _summaries = self.model.end_trace(key)
            out.extend(self.model.reported(dets))
        return out

    # -- helpers (called with self.lock held where noted) ---------------------------------

    def _trace(self, tid: int) -> _Trace:
        """The trace's state, created on first use (lock held)."""
        now = time.monotonic()
        trace = self.traces.get(tid)
        if trace is None:
            trace = self.traces[tid] = _Trace(format(tid, "032x"), now)
            if len(self.traces) > self._max_runs:
                self.traces.popitem(last=False)
        else:
            trace.last_seen = now
            self.traces.move_to_end(tid)
        return trace

    def _run_for(self, tid: int, cp: Ctx) -> Run:
        """The run of a span whose parent passes ``cp``: its agent's run, or the
        trace's calls outside any agent (lock held)."""
        trace = self._trace(tid)
        run = cp[0]
        if run is not None:
            return run  # type: ignore[no-any-return]
        run = trace.runs.get("")
        if run is None:
            root = self.roots.get(tid)
            run = Run("", None, root, root.sid) if root is not None else Run("", None, _NO_SPAN, None)
            trace.runs[""] = run
        return run

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
        while self.traces:
            trace = next(iter(self.traces.values()))
            if trace.last_seen > limit:
                break
            self.traces.popitem(last=False)
            self.roots.pop(int(trace.hex, 16), None)
        self._report_evictions()
        return ended

    def _report_evictions(self) -> None:
        """Count the runs the engine dropped since the last report (lock held)."""
        evicted = self.model.evictions()
        if evicted:
            self._evicted(evicted)

    def _trim_spans(self) -> None:
        with self.lock:
            if len(self.spans) > self.max_spans:
                _trim(self.spans, self.max_spans)


def _trim(table: dict[int, Any], limit: int) -> None:
    """Forget the oldest tenth of a table of open spans (spans that never ended)."""
    try:
        stale = list(islice(table, max(1, limit // 10)))
    except RuntimeError:  # resized by another thread: next time
        return
    for key in stale:
        table.pop(key, None)
