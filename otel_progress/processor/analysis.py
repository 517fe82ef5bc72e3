"""The processor's span bookkeeping: each span start and end fed to the
:class:`~otel_progress.runs.live.RunTracker`, and what the wrapped processors get.

:class:`SpanAnalysis` holds the routes a span can take (the processor installs the ones
its mode needs, see :class:`~.span_processor.ProgressSpanProcessor`): the inline fast
paths, which read an SDK span's own fields, their public-API twins for an SDK laid out
otherwise (:mod:`.sdk`), annotating in place in ``_on_ending``, and the start and end the
background worker replays (:mod:`.handoff`). Every error is caught and reported
(``fail``); the wrapped processors get every span whatever happened.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span

from ..runs.live import RunTracker
from ..runs.livetables import CLASSIFY_KEYS, OTHER, Entry
from .annotation import SpanAnnotator
from .content import ContentWatch
from .forwarding import WrappedProcessors
from .sdk import SHAPE_ERRORS, local_parent, public_fields, scope_name, span_fields

__all__ = ["SpanAnalysis"]


class SpanAnalysis:
    """Feeds span starts and ends to ``tracker``; an ended span goes on to ``wrapped``
    as it is or as the copy ``annotator`` made.

    ``background``: the spans are analysed on the worker (set False when the processor
    falls back to inline analysis at shutdown): a span that was not registered at its
    start is then not matched against this thread's current span.
    """

    def __init__(self, tracker: RunTracker, wrapped: WrappedProcessors, annotator: SpanAnnotator,
                 content: ContentWatch, fail: Callable[[str, BaseException], None], *, background: bool) -> None:
        self.background = background
        self._tracker = tracker
        self._spans = tracker.spans  # (the same table: one attribute lookup less on every span)
        self._starters = wrapped.starters
        self._forward_start = wrapped.start
        self._forward_end = wrapped.end
        self._forward_on_ending = wrapped.on_ending
        self._inner_end = wrapped.inner_end
        self._annotator = annotator
        self._content = content
        self._fail = fail

    # -- span starts ------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """``on_start``, inline analysis. This runs for every span."""
        if self._starters:
            self._forward_start(span, parent_context)
        try:
            try:
                parent = span._parent
                attrs = span._attributes._dict  # type: ignore[attr-defined]
                if parent is not None and not parent[2] and CLASSIFY_KEYS.isdisjoint(attrs):
                    # A plain span that is not a local root (most spans): RunTracker.start's
                    # first case, written out.
                    entry = self._spans.get(parent[1])
                    if entry is not None:
                        self._tracker.register_plain(span._context[1], entry[0], span._name)
                    return
                ctx = span._context
                fields = (ctx[0], ctx[1], parent, attrs, span._name)
                if type(attrs) is not dict:
                    raise TypeError
            except SHAPE_ERRORS:
                fields = public_fields(span)
            self._start_fields(span, fields, parent_context)
        except Exception as exc:
            self._fail("on_start", exc)

    def on_start_public(self, span: Span, parent_context: Context | None = None) -> None:
        """``on_start`` for an SDK whose spans are not laid out as the fast path expects."""
        if self._starters:
            self._forward_start(span, parent_context)
        try:
            self._start_fields(span, public_fields(span), parent_context)
        except Exception as exc:
            self._fail("on_start", exc)

    def _start_fields(self, span: Span, fields: Any, parent_context: Context | None) -> None:
        tid, sid, parent, attrs, name = fields
        parent_span = None
        if parent is not None and not parent[2] and not CLASSIFY_KEYS.isdisjoint(attrs):
            parent_span = local_parent(parent_context, parent[1])  # (a late agent kind: see RunTracker)
        self._tracker.start(span, tid, sid, parent, attrs, name, parent_span)

    def analyse_start(self, span: Any, attrs: Mapping[str, Any], name: str, parent_span: Any) -> None:
        """A span start, on the worker (``attrs`` and ``name``: as they were at start)."""
        tid, sid, parent, _, _ = span_fields(span)
        self._tracker.start(span, tid, sid, parent, attrs, name, parent_span)

    # -- span ends --------------------------------------------------------------------

    def on_ending(self, span: Span) -> None:
        """``_on_ending`` when annotating in place: the analysis, and the tool span's
        annotation while the SDK still lets it change."""
        self._forward_on_ending(span)
        try:
            tid, sid, parent, attrs, _ = span_fields(span)
            mine = self._tracker.end(span, tid, sid, parent, attrs, current=self._current(attrs, sid))
            if mine:
                self._annotator.in_place(span, sid, mine)
        except Exception as exc:
            self._fail("_on_ending", exc)

    def on_end(self, span: ReadableSpan) -> None:
        """``on_end``, inline analysis on the copy route. This runs for every span: a
        plain span that is not a local root costs a look at its attribute keys and one
        dict lookup. (The forwarding is :meth:`WrappedProcessors.end`, written out.)"""
        out = span
        try:
            try:
                parent = span._parent
                plain = CLASSIFY_KEYS.isdisjoint(span._attributes._dict)  # type: ignore[attr-defined]
                sid = span._context[1]
            except SHAPE_ERRORS:
                # (analysed once, publicly: a span it leaves unannotated comes back as it
                # was and must not be analysed again below; its tokens would count twice)
                out = self._analysed_public(span)
                parent, plain, sid = None, False, None
            if sid is None:
                pass
            elif parent is not None and not parent[2] and plain:
                # A plain span: forget it if it was inside a run.
                entry = self._spans.pop(sid, None)
                if entry is not None and entry[2] != OTHER:
                    out = self._annotated(span, entry)  # the attribute limit dropped its key
            elif out is span:
                out = self.analysed(span, None)
        except Exception as exc:
            self._fail("on_end", exc)
        inner = self._inner_end
        if inner is not None:
            try:
                inner(out)
            except Exception as exc:
                self._fail("wrapped on_end", exc)
        else:
            self._forward_end(out)

    def on_end_public(self, span: ReadableSpan) -> None:
        """``on_end`` for an SDK whose spans are not laid out as the fast path expects."""
        out = span
        try:
            out = self._analysed_public(span)
        except Exception as exc:
            self._fail("on_end", exc)
        self._forward_end(out)

    def on_end_after_ending(self, span: ReadableSpan) -> None:
        """``on_end`` when annotating in place: the work was done in ``_on_ending``; a
        span the SDK did not let it change gets an annotated copy."""
        out = span
        annotator = self._annotator
        if annotator.pending:
            try:
                out = annotator.pending_copy(span)
            except Exception as exc:
                self._fail("on_end", exc)
        self._forward_end(out)

    @staticmethod
    def _current(attrs: Mapping[str, Any], sid: int) -> Any:
        """For a span that was not registered at start but is a GenAI span at its end (a
        kind that appeared late): the current span, normally its parent."""
        if CLASSIFY_KEYS.isdisjoint(attrs):
            return None
        from opentelemetry.trace import get_current_span

        current = get_current_span()
        return current if current.get_span_context().span_id != sid else None

    def _analysed_public(self, span: ReadableSpan) -> ReadableSpan:
        """:meth:`analysed` for a span whose own fields are not what the fast path reads."""
        return self._annotated(span, None, public_fields(span))

    def analysed(self, span: ReadableSpan, current: Any = None) -> ReadableSpan:
        """Feed an ended span to the engine (copy route); return what the wrapped
        processors get: the span, or an annotated copy. (The worker's end, too.)"""
        fields = span_fields(span)
        parent = fields[2]
        if parent is not None and not parent[2] and CLASSIFY_KEYS.isdisjoint(fields[3]):
            entry = self._spans.pop(fields[1], None)  # a plain span (see on_end)
            if entry is None or entry[2] == OTHER:
                return span
            return self._annotated(span, entry, fields)
        return self._annotated(span, None, fields, current)

    def _annotated(self, span: ReadableSpan, entry: Entry | None, fields: Any = None,
                   current: Any = None) -> ReadableSpan:
        """Past the shortcut for plain spans (``entry``: the span's open-span entry if it
        was taken out already)."""
        tid, sid, parent, attrs, _ = fields if fields is not None else span_fields(span)
        if entry is None and current is None and not self.background and sid not in self._spans:
            current = self._current(attrs, sid)
        mine = self._tracker.end(span, tid, sid, parent, attrs, entry, current)
        if not CLASSIFY_KEYS.isdisjoint(attrs):
            self._content.genai_span(tid, attrs, scope_name(span))
        if parent is None or parent[2]:
            self._content.run_ended(tid)
        return self._annotator.copy(span, sid, mine)

    def end_grouped_runs(self, emit: Callable[[Any], None]) -> None:
        """Shutting down: the grouped runs still open end here (an explicit end), counted
        and summarised like any run."""
        try:
            with self._tracker.lock:
                dets = self._tracker.end_groups()
            for det in dets:
                emit(det)
        except Exception as exc:
            self._fail("shutdown", exc)
