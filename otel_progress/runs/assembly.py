"""Completing traces read after the fact (``otel-progress scan``): by the spans' own clock
and by a memory budget, never by a count of documents.

Spans arrive in export order: a line of the Collector's file exporter holds spans of
several traces, a trace's spans are spread over several lines, and a file written by
several replicas, merged from several exporters or sorted by another key has them in any
order. :class:`TraceAssembler` holds each trace's spans until the trace is complete, then
hands it over whole, so a scan holds the traces in flight rather than the whole input.

**Completion.** A trace is complete when its root span (the one without a parent) has been
read and the input's clock (the latest span end read so far, the *watermark*) has passed
the root's end by ``grace_seconds``: spans of a trace exported by another process arrive a
little after the root. A trace without a root is complete when the input ends.

**Budget.** When more than ``max_held_spans`` spans are held, traces are completed early:
those whose root was read first (oldest root first), then the least recently active ones,
even without their root (reported as analysed before they were complete).

**Late spans.** A span of a trace that was already handed over is *late*: the trace is
marked for another analysis (:attr:`TraceAssembler.late`, with every input line that held
one of its spans), and the scan reads those lines again once the input is done and
analyses the trace whole (see :mod:`otel_progress.scan`). So the detections do not depend
on the order of the documents; what bounds it is the budget above, and ``max_finished``
(how many handed-over traces are remembered: a span of a trace forgotten by then is
skipped and reported).

Ids are checked on the way in: a second span with the id and the content of one already
held (a duplicate export) is dropped, a different span with an id already used in its
trace is kept under a distinct id (``<id>#2``). Each case is reported to the caller.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..conventions.spans import SpanRecord

__all__ = ["AssembledTrace", "TraceAssembler"]

_S = 1_000_000_000


@dataclass
class AssembledTrace:
    """One trace's spans, with where each was read (``lines``: span id -> line) and the
    trace's place in the input (``order``: first appearance, ``start_ns``: earliest start)."""

    trace_id: str
    source: str
    order: int
    start_ns: int
    spans: dict[str, SpanRecord] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    root_end_ns: int | None = None
    complete: bool = True
    #: every input line that held a span of the trace (packed: see ``TraceAssembler.where``)
    documents: set[int] = field(default_factory=set)


class TraceAssembler:
    """Collects spans into traces and releases each trace once it is complete.

    ``add`` returns the problem found with that span, if any; ``end_document`` returns the
    traces that became complete; ``finish`` returns the rest. ``late`` holds the ids of the
    traces that received a span after they were released (:meth:`late_lines`: the input
    lines that held their spans).
    """

    def __init__(
        self,
        *,
        grace_seconds: float = 30.0,
        max_held_spans: int = 200_000,
        max_finished: int = 100_000,
        grace_documents: int | None = None,  # accepted for compatibility; completion is by clock
    ) -> None:
        self._open: OrderedDict[str, AssembledTrace] = OrderedDict()  # least recently active first
        self._rooted: OrderedDict[str, None] = OrderedDict()  # traces whose root was seen, oldest first
        # released traces -> the input lines of their spans (packed)
        self._finished: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._sources: dict[str, int] = {}
        self._last: tuple[str, int, int] = ("", -1, 0)  # the last (source, line) packed
        self.sources: list[str] = []
        self._grace_ns = int(grace_seconds * _S) if grace_seconds < 1e9 else 1 << 62
        self._max_held = max_held_spans
        self._max_finished = max_finished
        self._held = 0
        self._order = 0
        self._watermark = 0
        self.late: dict[str, set[int]] = {}
        self.duplicates = 0
        self.renamed = 0
        self.incomplete = 0

    @property
    def held_spans(self) -> int:
        """Spans held right now."""
        return self._held

    def add(self, span: SpanRecord, source: str, line: int) -> tuple[str, str] | None:
        """Add one span read at ``source``:``line``; returns a problem as ``(kind,
        message)`` (kind ``late``: the span was skipped; ``id``: its id was reused and it
        was renamed), or None."""
        trace_id = span.trace_id
        trace = self._open.get(trace_id)
        if trace is None:
            if trace_id in self._finished or trace_id in self.late:
                self._late(trace_id, self._pack(source, line))
                return None
            trace = self._open[trace_id] = AssembledTrace(trace_id, source, self._order, span.start_ns)
            self._order += 1
        else:
            self._open.move_to_end(trace_id)
        problem: tuple[str, str] | None = None
        span_id = span.span_id
        known = trace.spans.get(span_id)
        if known is not None:
            if _same(known, span):
                self.duplicates += 1
                return None  # a duplicate export: counted, reported once at the end
            n = 2
            while f"{span_id}#{n}" in trace.spans:
                n += 1
            new_id = f"{span_id}#{n}"
            problem = "id", (f"span id {span_id} is used by more than one span of trace {trace_id}; this one"
                              f" ({span.name!r}) is analysed as {new_id}")
            span = dataclasses.replace(span, span_id=new_id)
            span_id = new_id
            self.renamed += 1
        trace.spans[span_id] = span
        trace.lines[span_id] = line
        trace.documents.add(self._pack(source, line))
        self._held += 1
        if span.start_ns < trace.start_ns:
            trace.start_ns = span.start_ns
        if span.end_ns > self._watermark:
            self._watermark = span.end_ns
        if not span.parent_id and trace.root_end_ns is None:
            trace.root_end_ns = span.end_ns
            self._rooted[trace_id] = None
        return problem

    def _pack(self, source: str, line: int) -> int:
        if line == self._last[1] and source is self._last[0]:  # the spans of one document
            return self._last[2]
        packed = self._pack_new(source, line)
        self._last = (source, line, packed)
        return packed

    def _pack_new(self, source: str, line: int) -> int:
        index = self._sources.get(source)
        if index is None:
            index = self._sources[source] = len(self.sources)
            self.sources.append(source)
        return index << 40 | line

    def _late(self, trace_id: str, where: int) -> None:
        lines = self.late.get(trace_id)
        if lines is None:
            lines = self.late[trace_id] = set(self._finished.pop(trace_id, ()))
        lines.add(where)

    def late_lines(self) -> dict[str, set[int]]:
        """The input lines to read again, by source: those of every late trace."""
        out: dict[str, set[int]] = {}
        for lines in self.late.values():
            for packed in lines:
                out.setdefault(self.sources[packed >> 40], set()).add(packed & (1 << 40) - 1)
        return out

    def end_document(self) -> list[AssembledTrace]:
        """One document has been read: the traces complete now."""
        out: list[AssembledTrace] = []
        horizon = self._watermark - self._grace_ns
        while self._rooted:
            trace = self._open[next(iter(self._rooted))]
            if (trace.root_end_ns or 0) > horizon:
                break
            out.append(self._release(trace.trace_id))
        while self._held > self._max_held and self._open:
            if self._rooted:
                out.append(self._release(next(iter(self._rooted))))
            else:
                trace = self._release(next(iter(self._open)))
                trace.complete = False
                self.incomplete += 1
                out.append(trace)
        return out

    def finish(self) -> Iterator[AssembledTrace]:
        """The input has ended: every trace still held, in order of first appearance."""
        for trace in sorted(self._open.values(), key=lambda t: t.order):
            self._held -= len(trace.spans)
            yield trace
        self._open.clear()
        self._rooted.clear()

    def _release(self, trace_id: str) -> AssembledTrace:
        trace = self._open.pop(trace_id)
        self._rooted.pop(trace_id, None)
        self._held -= len(trace.spans)
        self._finished[trace_id] = tuple(trace.documents)
        if len(self._finished) > self._max_finished:
            self._finished.popitem(last=False)
        return trace

    def is_known(self, trace_id: str) -> bool:
        """Whether a trace is held, or was released and is still remembered."""
        return trace_id in self._open or trace_id in self._finished or trace_id in self.late


def _same(a: SpanRecord, b: SpanRecord) -> bool:
    return (a.name, a.parent_id, a.start_ns, a.end_ns) == (b.name, b.parent_id, b.start_ns, b.end_ns)
