"""Grouping streamed spans into complete traces, for ``otel-progress scan``.

Spans arrive in export order: a line of the Collector's file exporter holds spans of
several traces, and a trace's spans are spread over several lines. :class:`TraceAssembler`
holds each trace's spans until the trace is complete, then hands it over whole, so the
scan holds the traces in flight rather than the whole input.

A trace is complete when its root span (the one without a parent) has been seen and the
input has moved on past it: ``grace_documents`` more documents read and a span ending
``grace_seconds`` after the root's end seen (spans of a trace exported by another process
may arrive a little after the root). Otherwise a trace is complete when the input ends.
When more than ``max_held_spans`` spans are held, the traces whose roots were seen are
completed first (oldest root first), then the least recently active traces, even
without their root: those are reported as analysed before they were complete.

Ids are checked on the way in: a second span with the id and the content of one already
held (a duplicate export) is dropped, a different span with an id already used in its
trace is kept under a distinct id (``<id>#2``), and a span of a trace that was already
analysed is skipped. Each case is reported to the caller.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from .spans import SpanRecord

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
    root_document: int = 0
    complete: bool = True


class TraceAssembler:
    """Collects spans into traces and releases each trace once it is complete.

    ``add`` returns the problem found with that span, if any;
    ``end_document`` returns the traces that became complete; ``finish`` returns the rest.
    """

    def __init__(
        self,
        *,
        grace_documents: int = 64,
        grace_seconds: float = 30.0,
        max_held_spans: int = 200_000,
        max_finished: int = 100_000,
    ) -> None:
        self._open: OrderedDict[str, AssembledTrace] = OrderedDict()  # least recently active first
        self._rooted: OrderedDict[str, None] = OrderedDict()  # traces whose root was seen, oldest first
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._grace_documents = grace_documents
        self._grace_ns = int(grace_seconds * _S)
        self._max_held = max_held_spans
        self._max_finished = max_finished
        self._held = 0
        self._documents = 0
        self._order = 0
        self._watermark = 0
        self.duplicates = 0
        self.renamed = 0
        self.late = 0
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
            if trace_id in self._finished:
                self.late += 1
                return "late", (f"span {span.span_id} of trace {trace_id} arrived after its trace was analysed"
                                f" (its root span ended {self._grace_documents}+ documents earlier); skipped")
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
            span = _renamed(span, new_id)
            span_id = new_id
            self.renamed += 1
        trace.spans[span_id] = span
        trace.lines[span_id] = line
        self._held += 1
        if span.start_ns < trace.start_ns:
            trace.start_ns = span.start_ns
        if span.end_ns > self._watermark:
            self._watermark = span.end_ns
        if not span.parent_id and trace.root_end_ns is None:
            trace.root_end_ns = span.end_ns
            trace.root_document = self._documents
            self._rooted[trace_id] = None
        return problem

    def end_document(self) -> list[AssembledTrace]:
        """One document has been read: the traces complete now."""
        self._documents += 1
        out: list[AssembledTrace] = []
        while self._rooted:
            trace_id = next(iter(self._rooted))
            trace = self._open[trace_id]
            if (self._documents - trace.root_document < self._grace_documents
                    or self._watermark < (trace.root_end_ns or 0) + self._grace_ns):
                break
            out.append(self._release(trace_id))
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
        self._finished[trace_id] = None
        if len(self._finished) > self._max_finished:
            self._finished.popitem(last=False)
        return trace


def _same(a: SpanRecord, b: SpanRecord) -> bool:
    return (a.name, a.parent_id, a.start_ns, a.end_ns) == (b.name, b.parent_id, b.start_ns, b.end_ns)


def _renamed(span: SpanRecord, span_id: str) -> SpanRecord:
    return dataclasses.replace(span, span_id=span_id)
