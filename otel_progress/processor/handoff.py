"""Background analysis: the hand-off between the threads that start and end spans and
one analysis worker thread.

The application's threads only queue what the worker needs (an ended span is queued by
reference: it no longer changes; at a span's start, a snapshot of its attributes and
name); the worker replays, in order, exactly what the inline mode does at each start and
end, then hands each span (annotated or not) to the wrapped processors in the order the
spans ended. See docs/processor.md, *Background analysis*, for the trade-offs.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from opentelemetry.context import Context

from ..runs.livetables import CLASSIFY_KEYS
from .sdk import SHAPE_ERRORS, local_parent, public_fields

__all__ = ["BackgroundAnalysis"]

_log = logging.getLogger("otel_progress.processor")

# The queue's items are (_START, span, attributes at start, name at start[, parent span]),
# (_END, ended span[, current span]), (_MARK, threading.Event) for flush and shutdown, and
# (_DROPPED, weak reference) for a span the application dropped (queued behind its end,
# if it ended).
_START, _END, _MARK, _DROPPED = 0, 1, 2, 3
_PLAIN: Mapping[str, Any] = MappingProxyType({})  # the start snapshot of a plain span
# The worker looks at the queue every _POLL_SECONDS while spans keep coming (it processed
# some in the last _ACTIVE_SECONDS), every _IDLE_WAIT_SECONDS otherwise. The ending
# threads do not wake it (a cross-thread wake-up costs them more than the whole hand-off),
# except when the queue is filling up; force_flush and shutdown do.
_POLL_SECONDS = 0.005
_ACTIVE_SECONDS = 1.0
_IDLE_WAIT_SECONDS = 0.1
_FULL_WAIT_SECONDS = 1.0  # how long a thread waits for room in a full queue before it overflows the bound
_BATCH = 64  # items the worker processes per hold of its lock


def _current_span() -> Any:
    from opentelemetry.trace import get_current_span

    return get_current_span()


class _Queue:
    """The hand-off's queue and the worker's wake-up. It holds no reference to the
    processor, so that a processor the application dropped can be collected (its worker
    then exits)."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self.wake_at = max(1, max_size // 4)  # an ending thread wakes the worker from this length on
        self.resume_at = max(1, max_size * 3 // 4)  # a thread waiting for room goes on below it
        self.items: deque[tuple[Any, ...]] = deque()
        # One token per queued span end not yet handed to the wrapped processors (a deque:
        # appends and pops are atomic); a span may bypass the queue only when it is empty.
        self.ends: deque[None] = deque()
        self.busy = threading.Lock()  # held while one item is processed
        # The worker sleeps on acquiring ``bell`` (held otherwise); releasing it wakes the
        # worker: one C call, cheaper than an Event on the ending thread.
        self.bell = threading.Lock()
        self.bell.acquire()
        self.room = threading.Condition(threading.Lock())  # notified when a full queue has room
        self.waiting = 0  # threads waiting for room
        self.sleeping = False  # the worker is (about to be) waiting on ``bell``
        self.last_work = 0.0  # when the worker last processed items (monotonic)
        self.stalled = False  # a wait for room timed out; cleared when the worker progresses
        self.stopping = False
        self.thread: threading.Thread | None = None
        self.ident: int | None = None  # the worker's thread id
        self.start_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.items)

    def ring(self) -> None:
        """Wake the worker (or make its next sleep return at once)."""
        try:  # noqa: SIM105 (no context manager object on the ending thread)
            self.bell.release()
        except RuntimeError:  # released already, by another thread
            pass

    def sleep(self) -> None:
        """The worker waits for ``ring`` or for its polling interval, unless there is work."""
        self.sleeping = True
        if not self.items:  # (checked after ``sleeping`` is set: see ``put``)
            active = time.monotonic() - self.last_work < _ACTIVE_SECONDS
            self.bell.acquire(timeout=_POLL_SECONDS if active else _IDLE_WAIT_SECONDS)
        self.sleeping = False

    def idle(self) -> bool:
        """Nothing queued and nothing being processed."""
        return not self.items and not self.busy.locked()


def _worker(ref: weakref.ReferenceType[BackgroundAnalysis], q: _Queue) -> None:
    """The worker thread's loop. It holds the hand-off (and through it the processor)
    only while it processes items, not while it sleeps: a processor the application
    dropped is collected, and the worker ends."""
    while True:
        handoff = ref()
        if handoff is None:
            return
        try:
            go_on = handoff.work()
        except Exception as exc:  # a bug in the loop itself: count it, keep the worker alive
            handoff.fail("analysis worker", exc)
            go_on = True
        del handoff
        if not go_on:
            return
        q.sleep()


class BackgroundAnalysis:
    """The queue, the worker and the ``on_start`` / ``on_end`` of the application's
    threads in background mode.

    Args:
        max_queue_size: queued starts and ends before an ending thread waits for room.
        max_spans: bound of the table of spans whose start was queued.
        forward_start: hands a span start to the wrapped processors that want it (None:
            none do).
        forward_end: hands an ended span to the wrapped processors.
        inner_end: the one wrapped processor's ``on_end`` (None: not exactly one).
        analyse_start: ``analyse_start(span, attributes, name, parent span or None)``:
            what the inline mode does at a span's start (on the worker).
        analyse_end: ``analyse_end(span, current span or None)`` -> the span to forward:
            what the inline mode does at a span's end (on the worker).
        fail: counts and logs an error.
        queue_full: ``queue_full("waited" | "overflow")``, for the metric.
        forget: ``forget(weak reference)``: a span the application dropped, on the worker,
            once every span end queued before it was dropped has been analysed.
    """

    def __init__(self, max_queue_size: int, max_spans: int,
                 forward_start: Callable[[Any, Context | None], None] | None,
                 forward_end: Callable[[Any], None], inner_end: Callable[[Any], None] | None,
                 analyse_start: Callable[[Any, Mapping[str, Any], str, Any], None],
                 analyse_end: Callable[[Any, Any], Any],
                 fail: Callable[[str, BaseException], None], queue_full: Callable[[str], None],
                 forget: Callable[[Any], None] | None = None) -> None:
        self.q = _Queue(max(1, int(max_queue_size)))
        self._max_spans = max_spans
        self._forward_start = forward_start
        self._forward_end = forward_end
        self._inner_end = inner_end
        self._analyse_start = analyse_start
        self._analyse_end = analyse_end
        self.fail = fail
        self._queue_full = queue_full
        self._forget = forget
        # The ids of the spans whose start was queued and whose end was not seen yet
        # (the spans the worker will have in its tables), with whether they were plain
        # at their start.
        self._watched: dict[int, bool] = {}

    def __len__(self) -> int:
        return len(self.q)

    def dropped(self, ref: Any) -> None:
        """The garbage collector's callback for a span the application dropped (any
        thread, any moment): queue it behind everything queued so far (not once the worker
        is stopped: then the tables' bounds drop its entries)."""
        q = self.q
        if not q.stopping:
            q.items.append((_DROPPED, ref))

    # -- the threads that start and end spans -------------------------------------------

    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        """Forward, then queue what the worker needs of a span the inline mode would
        register (a snapshot: the attributes may still change). Plain spans outside any
        run are not queued."""
        if self._forward_start is not None:
            self._forward_start(span, parent_context)
        try:
            try:
                attrs = span._attributes._dict
                parent = span._parent
                plain = CLASSIFY_KEYS.isdisjoint(attrs)
                if plain and parent is not None and not parent[2] and parent[1] not in self._watched:
                    return  # outside any run: nothing to remember (most spans: written out)
                root = parent is None or parent[2]
                sid = span._context[1]
                name = span._name
            except SHAPE_ERRORS:
                _, sid, parent, attrs, name = public_fields(span)
                root = parent is None or parent[2]
                plain = CLASSIFY_KEYS.isdisjoint(attrs)
            if plain:
                if root:  # a local root: the worker keeps it for its trace
                    self.put((_START, span, _PLAIN, name))
                    return
                if parent[1] not in self._watched:
                    return  # outside any run: nothing to remember
                item: tuple[Any, ...] = (_START, span, _PLAIN, name)
            elif root:
                item = (_START, span, dict(attrs), name)
            else:  # (the parent object: it may have become an agent since it started)
                item = (_START, span, dict(attrs), name, local_parent(parent_context, parent[1]))
            watched = self._watched
            watched[sid] = plain
            if len(watched) > self._max_spans:
                _trim(watched, self._max_spans)
            q = self.q
            if len(q.items) < q.wake_at and q.thread is not None:
                q.items.append(item)  # put's common case
            else:
                self.put(item)
        except Exception as exc:
            self.fail("on_start", exc)

    def on_end(self, span: Any) -> None:
        """Queue the ended span (it no longer changes) behind everything queued before
        it. A plain span outside any run goes straight to the wrapped processors when no
        span end is waiting for the worker (queued starts do not matter: they hand
        nothing over)."""
        try:
            try:
                parent = span._parent
                root = parent is None or parent[2]
                plain = CLASSIFY_KEYS.isdisjoint(span._attributes._dict)
                sid = span._context[1]
            except SHAPE_ERRORS:
                _, sid, parent, attrs, _ = public_fields(span)
                root = parent is None or parent[2]
                plain = CLASSIFY_KEYS.isdisjoint(attrs)
            q = self.q
            watched = self._watched.pop(sid, None)
            if watched is not None or root or not plain or q.ends:
                # A span whose kind appeared after its start: the current span is its
                # parent, which may have become an agent.
                late = not plain and not root and watched is not False
                item = (_END, span, _current_span()) if late else (_END, span)
                q.ends.append(None)
                if len(q.items) < q.wake_at and q.thread is not None:
                    q.items.append(item)  # put's common case
                else:
                    self.put(item)
                return
        except Exception as exc:
            self.fail("on_end", exc)
        inner = self._inner_end  # (forward_end, written out: most spans take this path)
        if inner is not None:
            try:
                inner(span)
            except Exception as exc:
                self.fail("wrapped on_end", exc)
        else:
            self._forward_end(span)

    def put(self, item: tuple[Any, ...]) -> None:
        """Queue an item for the worker (which polls the queue), starting it on first
        use, waking it if the queue is filling up. Raises nothing once the item is queued.
        (The ending threads append directly while the worker runs and the queue is below
        ``wake_at``: then there is nothing else to do.)"""
        q = self.q
        if len(q.items) >= q.max_size:
            self._wait_for_room(q)
        q.items.append(item)
        if q.thread is None:
            self._start_worker(q)
        elif q.sleeping and len(q.items) >= q.wake_at:
            q.ring()

    def _wait_for_room(self, q: _Queue) -> None:
        """The queue is full: wait until the worker made room (a quarter of the queue, so
        that the two threads do not take turns item by item), at most a second; then
        (or at once if the worker made no progress since the last such timeout, or if
        this is the worker itself, ending a span in a hook) the item goes in past the
        bound. Spans are never dropped, and a thread never waits for long."""
        if q.stalled or q.thread is None or threading.get_ident() == q.ident:
            self._queue_full("overflow")
            return
        with q.room:
            q.waiting += 1
            try:
                q.ring()
                ok = q.room.wait_for(lambda: len(q.items) < q.resume_at, _FULL_WAIT_SECONDS)
            finally:
                q.waiting -= 1
        if not ok:
            q.stalled = True
        self._queue_full("waited" if ok else "overflow")

    def _start_worker(self, q: _Queue) -> None:
        with q.start_lock:
            if q.thread is not None:
                return
            thread = threading.Thread(target=_worker, args=(weakref.ref(self), q),
                                      name="OtelProgressAnalysis", daemon=True)
            try:
                thread.start()
            except Exception as exc:  # no new threads (interpreter shutdown): do it here
                self.fail("start analysis worker", exc)
                with q.busy:
                    while q.items:
                        self.process(q.items.popleft())
                return
            q.ident = thread.ident
            q.thread = thread

    def drain(self, deadline: float) -> bool:
        """Wait until the worker processed everything queued so far; False if the
        deadline passed first, or if this is the worker itself (a hook flushing)."""
        q = self.q
        if q.idle():
            return True
        if threading.get_ident() == q.ident:
            return False
        mark = threading.Event()
        q.items.append((_MARK, mark))  # past the bound if need be: it costs nothing
        if q.thread is None:
            self._start_worker(q)
        q.ring()
        return mark.wait(max(0.0, deadline - time.monotonic()))

    def stop(self, deadline: float, drained: bool) -> None:
        """Stop the worker (the processor analyses inline from now on): wait for it until
        ``deadline``, then process what is still queued here; if the worker is stuck,
        hand the rest over unanalysed rather than lose it."""
        q = self.q
        q.stopping = True
        q.ring()
        thread = q.thread
        if thread is not None and thread.ident != threading.get_ident():
            thread.join(max(0.0, deadline - time.monotonic()))
        if thread is None or not thread.is_alive():
            with q.busy:  # items queued while the switch happened
                while q.items:
                    self.process(q.items.popleft())
            return
        # The worker is stuck in one span (a hook or a wrapped processor that does not
        # return): hand the rest over unanalysed rather than lose them.
        forwarded = 0
        while q.items:
            item = q.items.popleft()
            if item[0] == _END:
                self._forward_end(item[1])
                if q.ends:
                    q.ends.pop()
                forwarded += 1
            elif item[0] == _MARK:
                item[1].set()
        _log.warning("otel-progress: shutdown: the analysis worker did not finish in time%s;"
                     " %d span(s) were passed on without analysis",
                     "" if drained else " (a hook or wrapped processor may be blocked)", forwarded)

    # -- the worker ---------------------------------------------------------------------

    def work(self) -> bool:
        """Process everything queued, in order; False once stopped."""
        q = self.q
        q.ident = threading.get_ident()
        items = q.items
        process = self.process
        if items:
            q.last_work = time.monotonic()
        while items:
            with q.busy:  # (taken per batch of items: a lock per item costs more than the item)
                for _ in range(_BATCH):
                    try:
                        item = items.popleft()
                    except IndexError:
                        break
                    process(item)
            q.stalled = False
            if q.waiting and len(items) < q.resume_at:
                with q.room:
                    q.room.notify_all()
        return not q.stopping

    def process(self, item: tuple[Any, ...]) -> None:
        """What the inline mode does in ``on_start`` or ``on_end``, for one queued item."""
        kind = item[0]
        if kind == _END:
            out = span = item[1]
            try:
                out = self._analyse_end(span, item[2] if len(item) > 2 else None)
            except Exception as exc:
                self.fail("on_end", exc)
            self._forward_end(out)
            ends = self.q.ends
            if ends:  # (a token is queued before each end: always)
                ends.pop()
        elif kind == _START:
            try:
                self._analyse_start(item[1], item[2], item[3], item[4] if len(item) > 4 else None)
            except Exception as exc:
                self.fail("on_start", exc)
        elif kind == _MARK:
            item[1].set()
        elif self._forget is not None:
            try:
                self._forget(item[1])
            except Exception as exc:
                self.fail("forget a dropped span", exc)


def _trim(table: dict[int, Any], limit: int) -> None:
    try:
        stale = [k for _, k in zip(range(max(1, limit // 10)), table, strict=False)]
    except RuntimeError:  # resized by another thread: next time
        return
    for key in stale:
        table.pop(key, None)
