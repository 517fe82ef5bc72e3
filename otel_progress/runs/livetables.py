"""What the live driver (:mod:`.live`) holds of the spans in flight, in bounded tables.

Only what the analysis needs, and nothing more: ids, kind, the plan node's name and the
run a span belongs to (never the span object: an agent or root span is referenced
weakly, for its live annotation only, so a span the application drops without ending it
is freed as it would be without the processor). The tables:

* ``spans``: open spans inside a run or a tool call (``max_spans``; the oldest tenth is
  forgotten when it is full);
* ``roots``: open local root spans, one per trace (``max_spans``, the same way);
* ``traces``: traces with run state (``max_runs``, least recently used first; idle ones
  are dropped after ``run_ttl_seconds``, see :meth:`LiveTables.drop_idle`).

The kind codes and the context a span passes to its children (:data:`Ctx`) are the
shapes of these tables' entries; the processor reads them on its fast path.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from itertools import islice
from typing import Any

from ..conventions import MARKER_KEYS
from ..conventions.spans import SpanKind, SpanRecord, agent_name, classify

__all__ = ["AGENT", "CLASSIFY_KEYS", "MODEL", "NO_CTX", "OTHER", "TOOL", "Ctx", "Entry", "LiveTables", "LiveTrace",
           "Run", "kind_of"]

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
_NO_SPAN: Callable[[], Any] = lambda: None  # noqa: E731 (a dead weak reference)


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


class LiveTrace:
    """A trace with run state: its runs (by hex id, ``""`` for its calls outside any
    agent), how many of them are open agent runs, when it was last seen (monotonic)."""

    __slots__ = ("hex", "last_seen", "open_agents", "runs")

    def __init__(self, hex_id: str, now: float) -> None:
        self.hex = hex_id
        self.runs: dict[str, Run] = {}
        self.open_agents = 0
        self.last_seen = now


class LiveTables:
    """The live driver's tables of open spans, local roots and traces (see the module
    docstring), their bounds, and the spans the application dropped.

    ``lock`` guards ``traces`` (and the engine calls the driver makes with it);
    ``spans`` and ``roots`` are read and written without it on the hot path.

    Args:
        max_spans: bound of ``spans`` and ``roots``.
        max_runs: bound of ``traces``.
        on_dead: called (by the garbage collector, on any thread, at any moment: it must
            only queue) with the weak reference of an agent or root span the application
            dropped, to be passed to :meth:`forget` once every span end queued before
            it has been analysed; None: queued in ``dead`` and forgotten at :meth:`reap`.
    """

    def __init__(self, max_spans: int, max_runs: int, on_dead: Callable[[Any], Any] | None = None) -> None:
        self.lock = threading.Lock()
        self.spans: dict[int, Entry] = {}
        # trace id -> (its open local root span, weakly; the root's span id)
        self.roots: dict[int, Any] = {}  # (the root's _SpanRef: the span weakly, its ids)
        self.traces: OrderedDict[int, LiveTrace] = OrderedDict()
        self.max_spans = max_spans
        self.max_runs = max_runs
        # Agent and root spans the application dropped (their weak references died),
        # appended by the garbage collector's callback (any thread, any moment: it only
        # appends) and forgotten by reap() at the next start.
        self.dead: deque[_SpanRef] = deque()
        self._on_dead = on_dead if on_dead is not None else self.dead.append

    # -- references to spans ----------------------------------------------------------

    def ref(self, span: Any, tid: int, sid: int) -> Any:
        """The reference the tables keep to an agent or root span."""
        root = self.roots.get(tid)
        if root is not None and root.sid == sid:
            return root  # an agent span that is its trace's local root: one reference
        try:
            return _SpanRef(span, self._on_dead, tid, sid)
        except TypeError:  # a span type without weak references: hold it while it is open
            return _StrongRef(span, tid, sid)

    def reap(self) -> None:
        """Forget the agent and root spans the application dropped since the last call."""
        dead = self.dead
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

    # -- entries ----------------------------------------------------------------------

    def add_root(self, tid: int, sid: int, span: Any) -> None:
        """A local root span starts: the trace's root from now on."""
        roots = self.roots
        roots.pop(tid, None)  # (a new root of the trace: its own reference)
        roots[tid] = self.ref(span, tid, sid)
        if len(roots) > self.max_spans:
            _trim(roots, self.max_spans)

    def new_run(self, span: Any, tid: int, sid: int, name: str, attrs: Mapping[str, Any]) -> Run:
        """An agent span starts (or is found to be one): its run, open in its trace."""
        run = Run(format(sid, "016x"), agent_name(SpanRecord("", "", name=name, attributes=attrs)),
                  self.ref(span, tid, sid), sid)
        with self.lock:
            trace = self.trace(tid)
            trace.runs[run.hex] = run
            trace.open_agents += 1
        return run

    def close_agent(self, tid: int, run_hex: str, started_as_agent: bool) -> bool:
        """An agent span ended: its run leaves the trace (if it was opened at its start);
        True if that was the trace's last open agent run and its local root ended already
        (lock held)."""
        trace = self.traces.get(tid)
        if trace is not None and started_as_agent and trace.runs.pop(run_hex, None) is not None:
            trace.open_agents -= 1
        return trace is not None and trace.open_agents <= 0 and tid not in self.roots

    def pop_done(self, tid: int) -> LiveTrace | None:
        """The trace's local root ended: the trace leaves the table unless an agent run of
        it is still open (then None, as for a trace not here) (lock held)."""
        trace = self.traces.get(tid)
        if trace is None or trace.open_agents > 0:
            return None
        del self.traces[tid]
        return trace

    def trace(self, tid: int) -> LiveTrace:
        """The trace's state, created on first use (lock held)."""
        now = time.monotonic()
        trace = self.traces.get(tid)
        if trace is None:
            trace = self.traces[tid] = LiveTrace(format(tid, "032x"), now)
            if len(self.traces) > self.max_runs:
                self.traces.popitem(last=False)
        else:
            trace.last_seen = now
            self.traces.move_to_end(tid)
        return trace

    def run_for(self, tid: int, cp: Ctx) -> Run:
        """The run of a span whose parent passes ``cp``: its agent's run, or the
        trace's calls outside any agent (lock held)."""
        trace = self.trace(tid)
        run = cp[0]
        if run is not None:
            return run  # type: ignore[no-any-return]
        run = trace.runs.get("")
        if run is None:
            root = self.roots.get(tid)
            run = Run("", None, root, root.sid) if root is not None else Run("", None, _NO_SPAN, None)
            trace.runs[""] = run
        return run

    # -- bounds -----------------------------------------------------------------------

    def drop_idle(self, limit: float) -> None:
        """Drop the traces (and their roots) not seen since ``limit`` (lock held)."""
        while self.traces:
            trace = next(iter(self.traces.values()))
            if trace.last_seen > limit:
                break
            self.traces.popitem(last=False)
            self.roots.pop(int(trace.hex, 16), None)

    def trim_spans(self) -> None:
        """``spans`` is over its bound: forget its oldest tenth."""
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
