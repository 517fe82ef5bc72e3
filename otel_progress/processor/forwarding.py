"""The processors :class:`~.span_processor.ProgressSpanProcessor` wraps, and every call
forwarded to them (as the SDK's ``SynchronousMultiSpanProcessor`` does), each wrapped
processor's error caught and reported instead of raised."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from .sdk import NOOP_ON_START

__all__ = ["WrappedProcessors", "as_processors"]

Fail = Callable[[str, BaseException], None]


def _noop(span: Any) -> None:
    return None


def as_processors(span_processor: SpanProcessor | Sequence[SpanProcessor] | None) -> tuple[SpanProcessor, ...]:
    """The ``span_processor`` argument as a tuple (empty for None)."""
    if span_processor is None:
        return ()
    if isinstance(span_processor, SpanProcessor):
        return (span_processor,)
    return tuple(span_processor)


class WrappedProcessors:
    """Forwards span starts and ends, flush and shutdown to ``inners``, in order.

    ``starters``: the wrapped processors whose ``on_start`` does something (the exporting
    processors' does nothing: a span start is not forwarded to them, one Python call less
    on every span); ``inner_end``: the one wrapped processor's ``on_end`` (None: not
    exactly one), for the hot paths to call directly."""

    def __init__(self, inners: tuple[SpanProcessor, ...], fail: Fail) -> None:
        self.inners = inners
        self._fail = fail
        self.starters = tuple(p for p in inners if type(p).on_start not in NOOP_ON_START)
        self.inner_end = inners[0].on_end if len(inners) == 1 else None

    def start(self, span: Span, parent_context: Context | None = None) -> None:
        """Forward a span start to the ``starters``."""
        for proc in self.starters:
            try:
                proc.on_start(span, parent_context=parent_context)
            except Exception as exc:
                self._fail("wrapped on_start", exc)

    def end(self, span: ReadableSpan) -> None:
        """Forward an ended span (or its annotated copy)."""
        inner = self.inner_end
        if inner is not None:
            try:
                inner(span)
            except Exception as exc:
                self._fail("wrapped on_end", exc)
            return
        for proc in self.inners:
            try:
                proc.on_end(span)
            except Exception as exc:
                self._fail("wrapped on_end", exc)

    def on_ending(self, span: Span) -> None:
        """Forward ``_on_ending`` to the wrapped processors that have it."""
        for inner in self.inners:
            try:
                ending = getattr(inner, "_on_ending", None)
                if ending is not None:
                    ending(span)
            except Exception as exc:
                self._fail("wrapped _on_ending", exc)

    def ending_passthrough(self) -> Callable[[Span], None]:
        """The processor's ``_on_ending`` when it has nothing to do there: the one wrapped
        processor's own, a no-op, or :meth:`on_ending`."""
        inners = self.inners
        ending = getattr(inners[0], "_on_ending", None) if len(inners) == 1 else None
        if len(inners) == 1 and callable(ending):
            return ending  # type: ignore[no-any-return]
        if not inners:
            return _noop
        return self.on_ending

    def force_flush(self, deadline: float) -> bool:
        """Flush each wrapped processor with what is left until ``deadline`` (monotonic);
        False if any did not finish or raised."""
        ok = True
        for inner in self.inners:
            left = max(0, int((deadline - time.monotonic()) * 1000))
            try:
                ok = bool(inner.force_flush(left)) and ok
            except Exception as exc:
                self._fail("wrapped force_flush", exc)
                ok = False
        return ok

    def shutdown(self) -> None:
        """Shut each wrapped processor down."""
        for inner in self.inners:
            try:
                inner.shutdown()
            except Exception as exc:
                self._fail("wrapped shutdown", exc)
