"""``ProgressSpanProcessor``: the engine inside the OpenTelemetry Python SDK.

Feeds ending tool-call spans to a :class:`~otel_progress.engine.ProgressEngine` and puts
what it detects into the exported data:

* on the tool span where the detection fired: a ``no_progress`` / ``livelock`` event and
  the ``progress.*`` span attributes. The SDK freezes a span before processors see it
  ended, so this needs one of two routes, chosen once per process:

  - *ending*: the SDK lets ``_on_ending`` mutate the span (SDKs with the fix for
    opentelemetry-python issue #5614, detected by a probe at construction). The span is
    annotated in place, whatever the processor order.
  - *copy* (every released SDK up to 1.45): the processor wraps the exporting processor,
    ``ProgressSpanProcessor(BatchSpanProcessor(exporter))``, and hands it an annotated
    copy of the span.

* on the run's still-open ``invoke_agent`` span (or, for tool calls outside any agent
  span, the trace's local root span): the same event, through the public span API. This
  works with any processor order, including ``provider.add_span_processor(processor)``
  with no wrapped processor.

Where the analysis runs, chosen at construction (``analysis=``, ``OTEL_PROGRESS_ANALYSIS``;
the default, ``auto``, is background when the processor wraps the exporting processor
and no ``on_detection`` hook is given, inline otherwise):

* ``inline``: on the thread that ends the span, inside ``span.end()``. The hook has run
  and the agent span carries the event when ``end()`` returns, so a harness can inject
  the nudge before its next model call.
* ``background``: the ending thread only queues the span (a reference: an ended span no
  longer changes; at start, a snapshot of the attributes and name). One daemon worker
  thread replays exactly what the inline mode does, in the order the spans started and
  ended, then hands each span, annotated or not, to the wrapped processors in that same
  order, and calls the hook. Same detections, same exported spans, later.

Per-run state is keyed by the agent span (or the trace), freed when the agent span (or
the local root span) ends, dropped after ``run_ttl_seconds`` idle, and capped at
``max_runs`` (least recently used first). Open spans are tracked only while open, in a
table capped at ``max_spans``. Every error is caught, counted and logged at most once
per five minutes per kind: the processor never raises into the application.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice
from types import MappingProxyType
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import StatusCode

from .config import Config, ConfigError
from .engine import ProgressEngine, RunSummary
from .metrics import ProgressMetrics
from .model import Detection
from .spans import SpanKind, SpanRecord, agent_name, classify, read_tokens, read_tool_call

__all__ = ["ANALYSIS_MODES", "ENV_ANALYSIS", "DetectionHook", "ProgressSpanProcessor", "analysis_mode",
           "on_ending_is_mutable"]

_log = logging.getLogger(__name__)

DetectionHook = Callable[[Detection], Any]

_OTHER, _TOOL, _AGENT, _MODEL = 0, 1, 2, 3
_KIND_CODE = {SpanKind.OTHER: _OTHER, SpanKind.TOOL: _TOOL, SpanKind.AGENT: _AGENT, SpanKind.MODEL: _MODEL}
# Every attribute :func:`classify` consults: a span with none of them is "other".
_CLASSIFY_KEYS = frozenset({
    "gen_ai.operation.name", "openinference.span.kind", "traceloop.span.kind",
    "mcp.method.name", "gen_ai.usage.input_tokens", "llm.token_count.prompt",
})
# What a span passes to its children: (run, plan node, inside a tool call).
_Ctx = tuple[Any, "str | None", bool]
_NO_CTX: _Ctx = (None, None, False)
_LOG_EVERY_SECONDS = 300.0
_EVICT_EVERY_SECONDS = 1.0

#: The values of ``analysis=`` / ``OTEL_PROGRESS_ANALYSIS``.
ANALYSIS_MODES = ("auto", "inline", "background")
ENV_ANALYSIS = "OTEL_PROGRESS_ANALYSIS"
# Background analysis: the queue's items are (_START, span, attributes at start, name at
# start), (_END, ended span) and (_MARK, threading.Event) for force_flush and shutdown.
_START, _END, _MARK = 0, 1, 2
_PLAIN: Mapping[str, Any] = MappingProxyType({})  # the start snapshot of a plain span
# The worker looks at the queue every _POLL_SECONDS while spans keep coming (it processed
# some in the last _ACTIVE_SECONDS), every _IDLE_WAIT_SECONDS otherwise. The ending
# threads do not wake it (a cross-thread wake-up costs them more than the whole hand-off),
# except when the queue is filling up; force_flush and shutdown do.
_POLL_SECONDS = 0.005
_ACTIVE_SECONDS = 1.0
_IDLE_WAIT_SECONDS = 0.1
_FULL_WAIT_SECONDS = 1.0  # how long a thread waits for room in a full queue before it overflows the bound
_MAX_LATE = 4096  # agent spans awaiting a late annotation (see _deliver)
_EXIT_DRAIN_SECONDS = 10.0  # at interpreter exit, how long the queue may take to drain
_BATCH = 64  # items the worker processes per hold of its lock

# The ``on_start`` of the exporting processors: it does nothing, so it is not called.
_NOOP_ON_START = frozenset({SpanProcessor.on_start, BatchSpanProcessor.on_start, SimpleSpanProcessor.on_start})

_PROBE: tuple[bool, bool] | None = None
_PROBE_LOCK = threading.Lock()


def on_ending_is_mutable() -> bool:
    """Whether this SDK lets ``SpanProcessor._on_ending`` still modify the span (the fix
    for opentelemetry-python issue #5614). Probed once, with a private provider."""
    return _probe()[0]


def _probe() -> tuple[bool, bool]:
    """(``_on_ending`` can mutate, the SDK span has the layout the fast path reads)."""
    global _PROBE
    if _PROBE is None:
        with _PROBE_LOCK:
            if _PROBE is None:
                _PROBE = _run_probe()
    return _PROBE


def _run_probe() -> tuple[bool, bool]:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    seen: dict[str, bool] = {}

    class _Probe(SpanProcessor):
        def on_start(self, span: Span, parent_context: Context | None = None) -> None:
            try:
                seen["layout"] = (
                    type(span._attributes._dict) is dict  # type: ignore[attr-defined]
                    and span._attributes._dict.get("otel_progress.probe") == 1  # type: ignore[attr-defined]
                    and span._context[0] == span.context.trace_id
                    and span._context[1] == span.context.span_id
                    and span._name == span.name
                    and span._parent is span.parent
                )
            except Exception:
                seen["layout"] = False

        def _on_ending(self, span: Span) -> None:
            try:
                if span.is_recording():
                    span.set_attribute("otel_progress.probe", 2)
                    span.add_event("otel_progress.probe")
            except Exception:
                pass

        def on_end(self, span: ReadableSpan) -> None:
            seen["attr"] = (span.attributes or {}).get("otel_progress.probe") == 2
            seen["event"] = any(e.name == "otel_progress.probe" for e in span.events)
            try:
                seen["layout"] = seen.get("layout", False) and (
                    type(span._attributes._dict) is dict  # type: ignore[attr-defined]
                    and span._context[2] is span.context.is_remote
                )
            except Exception:
                seen["layout"] = False

    try:
        provider = TracerProvider(sampler=ALWAYS_ON, resource=Resource({}), shutdown_on_exit=False)
        provider.add_span_processor(_Probe())
        provider.get_tracer("otel_progress.probe").start_span(
            "probe", attributes={"otel_progress.probe": 1}).end()
        provider.shutdown()
    except Exception:
        _log.debug("otel-progress: SDK probe failed", exc_info=True)
        return False, False
    return bool(seen.get("attr") and seen.get("event")), bool(seen.get("layout"))


def analysis_mode(value: Any = None, source: str = "analysis") -> str:
    """The analysis setting, one of :data:`ANALYSIS_MODES`: ``value``, else
    ``OTEL_PROGRESS_ANALYSIS``, else ``"auto"``. Raises :class:`ConfigError` naming
    ``source`` (or the variable)."""
    if value is None:
        value, source = os.environ.get(ENV_ANALYSIS, ""), ENV_ANALYSIS
        if not value.strip():
            return "auto"
    mode = str(value).strip().lower()
    if mode not in ANALYSIS_MODES:
        raise ConfigError(f"{source}: expected {', '.join(ANALYSIS_MODES)}, got {value!r}")
    return mode


def _kind(attrs: Mapping[str, Any]) -> int:
    if _CLASSIFY_KEYS.isdisjoint(attrs):
        return _OTHER
    return _KIND_CODE[classify(SpanRecord("", "", attributes=attrs))]


def _record(span: ReadableSpan, attrs: Mapping[str, Any]) -> SpanRecord:
    ctx = span.context
    parent = span.parent
    status = span.status
    return SpanRecord(
        trace_id=format(ctx.trace_id, "032x"),
        span_id=format(ctx.span_id, "016x"),
        parent_id=format(parent.span_id, "016x") if parent is not None else "",
        name=span.name,
        start_ns=span.start_time or 0,
        end_ns=span.end_time or 0,
        attributes=attrs,
        error=status.status_code is StatusCode.ERROR,
        status_message=status.description or "",
        events=tuple((e.name, e.attributes or {}) for e in span.events),
    )


def _annotated_copy(span: ReadableSpan, detections: Sequence[Detection],
                    late: Sequence[tuple[Detection, int | None]] = ()) -> ReadableSpan:
    """A copy of an ended span with the detections' events (at the span's end) and span
    attributes added; the original's dropped counts are kept. ``late``: detections that
    were meant for the span while it was open (with their times), added first unless the
    span already has their event."""
    attributes = BoundedAttributes(None, span.attributes, immutable=False)
    events = BoundedList.from_seq(None, span.events)
    for det, when in late:
        attributes.update(det.span_attributes())
        if not any(_is_event_of(e, det) for e in span.events):
            events.append(Event(det.event, det.event_attributes(), timestamp=when))
    when = span.end_time
    for det in detections:
        attributes.update(det.span_attributes())
        events.append(Event(det.event, det.event_attributes(), timestamp=when))
    attributes._immutable = True  # as the SDK leaves an ended span's attributes
    attributes.dropped = span.dropped_attributes
    events.dropped = span.dropped_events
    links = BoundedList.from_seq(None, span.links)
    links.dropped = span.dropped_links
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        events=events,
        links=links,
        kind=span.kind,
        instrumentation_info=getattr(span, "_instrumentation_info", None),
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def _is_event_of(event: Event, det: Detection) -> bool:
    attrs = event.attributes or {}
    return (event.name == det.event and attrs.get("progress.turn") == det.turn
            and attrs.get("progress.reason") == det.reason.value
            and attrs.get("progress.level") == int(det.level)
            and attrs.get("progress.scope") == det.scope.value and attrs.get("progress.tool") == det.tool)


def _annotate_live(span: Span, detections: Iterable[Detection], timestamp: int | None = None) -> bool:
    """Add the detections to a span that is still recording; False if it was not."""
    if not span.is_recording():
        return False
    for det in detections:
        span.add_event(det.event, det.event_attributes(), timestamp)
        span.set_attributes(det.span_attributes())
    return True


class _Run:
    """One agent run (or a trace's calls outside any agent): what the processor keeps."""

    __slots__ = ("agent", "hex", "open_tools", "span")

    def __init__(self, hex_id: str, agent: str | None, span: Span | None) -> None:
        self.hex = hex_id
        self.agent = agent
        self.span = span
        self.open_tools = 0


class _Trace:
    __slots__ = ("hex", "last_seen", "open_agents", "runs")

    def __init__(self, hex_id: str, now: float) -> None:
        self.hex = hex_id
        self.runs: dict[str, _Run] = {}
        self.open_agents = 0
        self.last_seen = now


class _Queue:
    """The background mode's hand-off between the ending threads and the worker.

    It holds no reference to the processor, so that a processor the application dropped
    can be collected (its worker then exits)."""

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
        if not self.items:  # (checked after ``sleeping`` is set: see ``_put``)
            active = time.monotonic() - self.last_work < _ACTIVE_SECONDS
            self.bell.acquire(timeout=_POLL_SECONDS if active else _IDLE_WAIT_SECONDS)
        self.sleeping = False

    def idle(self) -> bool:
        """Nothing queued and nothing being processed."""
        return not self.items and not self.busy.locked()


def _analysis_worker(ref: weakref.ReferenceType[ProgressSpanProcessor], q: _Queue) -> None:
    """The worker thread's loop. It holds the processor only while it processes items,
    not while it sleeps: a processor the application dropped is collected, and the
    worker ends."""
    while True:
        processor = ref()
        if processor is None:
            return
        try:
            go_on = processor._work()
        except Exception as exc:  # a bug in the loop itself: count it, keep the worker alive
            processor._fail("analysis worker", exc)
            go_on = True
        del processor
        if not go_on:
            return
        q.sleep()


class ProgressSpanProcessor(SpanProcessor):
    """Detects agent runs that stopped making progress, from their tool-call spans.

    Args:
        span_processor: the processor(s) to wrap, normally the exporting one
            (``BatchSpanProcessor(exporter)``). They receive every call of this
            processor, in order; on SDKs whose ``_on_ending`` cannot modify spans they get
            an annotated copy of a tool span that carries a detection. ``None``: annotate
            the agent spans only (and the tool spans where ``_on_ending`` can).
        config: engine settings; default :meth:`Config.from_env` (``OTEL_PROGRESS_*``).
        engine: an engine to use instead of building one from ``config``.
        on_detection: called with every :class:`Detection` (its ``nudge`` and ``handoff``
            texts included) after the annotation: on the thread that ended the span
            (``inline``), or on the worker thread (``background``). Exceptions are caught
            and counted in ``progress.hook.errors``.
        meter_provider: for the metrics; default the global provider.
        annotate_tool_spans: put the event and attributes on the tool span.
        annotate_agent_spans: put the event on the run's open agent span (or the trace's
            local root span for calls outside any agent).
        max_spans: open spans tracked at once (the oldest are dropped first).
        use_on_ending: force (True) or forbid (False) annotating in ``_on_ending``;
            default: probe the SDK once. Inline analysis only.
        analysis: ``"inline"`` (analyse in ``span.end()``), ``"background"`` (queue
            the span; a worker thread analyses, annotates and forwards it, in order) or
            ``"auto"``: background when the processor wraps the exporting processor(s)
            and no ``on_detection`` hook is given; inline otherwise (a hook then runs
            before ``span.end()`` returns; without a wrapped processor, or with
            ``use_on_ending=True``, spans are annotated in place). Default:
            ``OTEL_PROGRESS_ANALYSIS``, else ``"auto"``.
        max_queue_size: background analysis: queued span starts and ends at most. A
            thread ending a span while the queue is full waits for room (at most a
            second, then queues past the bound); nothing is dropped.
    """

    def __init__(
        self,
        span_processor: SpanProcessor | Sequence[SpanProcessor] | None = None,
        *,
        config: Config | None = None,
        engine: ProgressEngine | None = None,
        on_detection: DetectionHook | None = None,
        meter_provider: MeterProvider | None = None,
        annotate_tool_spans: bool = True,
        annotate_agent_spans: bool = True,
        max_spans: int = 100_000,
        use_on_ending: bool | None = None,
        analysis: str | None = None,
        max_queue_size: int = 2048,
    ) -> None:
        mode = analysis_mode(analysis)
        if span_processor is None:
            inners: tuple[SpanProcessor, ...] = ()
        elif isinstance(span_processor, SpanProcessor):
            inners = (span_processor,)
        else:
            inners = tuple(span_processor)
        self._inners = inners
        self._config = engine.config if engine is not None else (config or Config.from_env())
        self._engine_given = engine is not None
        self._engine = engine if engine is not None else ProgressEngine(self._config)
        self._hook = on_detection
        self._annotate_tools = annotate_tool_spans
        self._annotate_agents = annotate_agent_spans
        self._max_spans = max(16, int(max_spans))
        mutable, layout = _probe()
        self._active = layout
        if not layout:
            _log.warning("otel-progress: this OpenTelemetry SDK's spans do not look as expected;"
                         " the progress processor only forwards spans")
        if mode == "auto":
            # A hook acts on a detection before the application's next step only inline.
            # Without a wrapped processor there is no copy to carry what the worker finds
            # after a span ended. Otherwise the application thread is spared the analysis.
            mode = "inline" if on_detection is not None or not inners or use_on_ending else "background"
        if mode == "background" and use_on_ending:
            raise ValueError("use_on_ending=True needs inline analysis: the worker analyses a"
                             " span after the SDK froze it")
        # Background analysis annotates copies (the worker gets the span after _on_ending).
        self._background = layout and mode == "background"
        self._ending = layout and not self._background and (
            mutable if use_on_ending is None else bool(use_on_ending))
        self._q = _Queue(max(1, int(max_queue_size)))  # (unused by inline analysis)
        # Nothing long-lived (the meter provider's callbacks, the fork hook, the worker)
        # holds the processor: once the application drops it, its worker thread ends.
        ref = weakref.ref(self)

        def active_runs() -> int:
            processor = ref()
            return processor._engine.active_runs if processor is not None else 0

        def queued() -> int:
            processor = ref()
            return len(processor._q) if processor is not None else 0

        self._metrics = ProgressMetrics(meter_provider, active_runs=active_runs,
                                        queued=queued if self._background else None)
        self.processor_errors = 0
        self.hook_errors = 0
        self._init_state()
        self._bind()

        def _after_fork() -> None:
            processor = ref()
            if processor is not None:
                processor._after_fork_in_child()

        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork)

        self._at_exit: Callable[[], None] | None = None
        if self._background:
            # Registered after the SDK's providers, so it runs before their shutdown (atexit
            # runs last-in first-out): the queued spans are analysed while the meter provider
            # and the exporters still take the detections and the spans.
            def _drain_at_exit() -> None:
                processor = ref()
                if processor is not None and processor._background:
                    processor._drain(time.monotonic() + _EXIT_DRAIN_SECONDS)

            self._at_exit = _drain_at_exit
            atexit.register(_drain_at_exit)

    # -- state ------------------------------------------------------------------------

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        # open spans inside a run or a tool call: span id -> (ctx for children,
        # ctx from the parent, kind at start)
        self._spans: dict[int, tuple[_Ctx, _Ctx, int]] = {}
        self._roots: dict[int, Span] = {}  # trace id -> its open local root span
        self._traces: OrderedDict[int, _Trace] = OrderedDict()
        self._copy_pending: dict[int, list[Detection]] = {}
        self._next_evict = 0.0
        self._evicted_reported = self._engine.stats.runs_evicted
        self._logged: dict[tuple[str, str], float] = {}
        # Background analysis. On the ending threads: the ids of the spans whose start
        # was queued and whose end was not seen yet (the spans the worker will have in
        # self._spans). On the worker: detections for agent (or root) spans that had
        # ended before the worker got to them, keyed by span id: added to the copy.
        self._watched: dict[int, bool] = {}
        self._late: dict[int, list[tuple[Detection, int | None]]] = {}

    def _after_fork_in_child(self) -> None:
        # Other threads' locks may have been held at fork time: start afresh. The
        # parent's queued spans are the parent's to export; the child's worker starts
        # with the child's first span.
        if not self._engine_given:
            self._engine = ProgressEngine(self._config)
        self._init_state()
        self._q = _Queue(self._q.max_size)

    def _bind(self) -> None:
        """Choose the paths a span takes once, so that it pays no extra indirection."""
        inners = self._inners
        # The exporting processors' on_start does nothing: a span start is not forwarded
        # to them (one Python call less on every span).
        self._starters = tuple(p for p in inners if type(p).on_start not in _NOOP_ON_START)
        self._inner_end = inners[0].on_end if len(inners) == 1 else None
        if not self._active:
            self.on_start = self._forward_start  # type: ignore[method-assign]
            self.on_end = self._forward_end  # type: ignore[method-assign]
        elif self._background:
            self.on_start = self._queue_start  # type: ignore[method-assign]
            self.on_end = self._queue_end  # type: ignore[method-assign]
        elif self._ending:
            self.on_end = self._on_end_after_ending  # type: ignore[method-assign]
            return
        # Nothing to do in _on_ending: hand the call straight to the wrapped processor.
        if len(inners) == 1:
            self._on_ending = inners[0]._on_ending  # type: ignore[method-assign]
        elif not inners:
            self._on_ending = _noop  # type: ignore[method-assign]
        else:
            self._on_ending = self._forward_on_ending  # type: ignore[method-assign]

    def _forward_on_ending(self, span: Span) -> None:
        for inner in self._inners:
            try:
                inner._on_ending(span)
            except Exception as exc:
                self._fail("wrapped _on_ending", exc)

    @property
    def engine(self) -> ProgressEngine:
        """The engine this processor feeds."""
        return self._engine

    @property
    def analysis(self) -> str:
        """Where the analysis runs: ``"inline"`` or ``"background"`` (``"auto"`` resolved;
        inline again once shut down)."""
        return "background" if self._background else "inline"

    @property
    def annotates_in_on_ending(self) -> bool:
        """True when tool spans are annotated in place in ``_on_ending``."""
        return self._ending

    @property
    def wrapped(self) -> tuple[SpanProcessor, ...]:
        """The processors this one forwards to."""
        return self._inners

    @property
    def active_runs(self) -> int:
        """Runs the engine tracks now."""
        return self._engine.active_runs

    @property
    def queued(self) -> int:
        """Background analysis: span starts and ends waiting for the worker."""
        return len(self._q)

    @property
    def open_spans(self) -> int:
        """Open spans the processor tracks (those inside a run or a tool call). With
        background analysis, this and the other figures are the worker's: call
        ``force_flush()`` first for figures that include every ended span."""
        return len(self._spans) + len(self._roots)

    @property
    def tracked_traces(self) -> int:
        """Traces with per-run state held by the processor."""
        return len(self._traces)

    # -- SpanProcessor ----------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        # Inline analysis (see _bind for the other modes). This runs for every span.
        if self._starters:
            self._forward_start(span, parent_context)
        try:
            parent = span._parent
            if parent is not None and not parent[2] and _CLASSIFY_KEYS.isdisjoint(span._attributes._dict):  # type: ignore[attr-defined]
                # A plain span that is not a local root (most spans): _observe_start's
                # first case, written out.
                entry = self._spans.get(parent[1])
                if entry is not None:
                    self._register_plain(span._context[1], entry[0], span._name)
                return
            self._observe_start(span, span._attributes._dict, span._name)  # type: ignore[attr-defined]
        except Exception as exc:
            self._fail("on_start", exc)

    def _on_ending(self, span: Span) -> None:
        # Reached only when annotating in place (see _bind).
        for inner in self._inners:
            try:
                inner._on_ending(span)
            except Exception as exc:
                self._fail("wrapped _on_ending", exc)
        try:
            mine = self._end(span)
            if mine and self._annotate_tools:
                _annotate_live(span, mine, span.end_time)
                if (span.attributes or {}).get("progress.detected") is not True:
                    # The SDK did not keep the change after all: fall back to the copy.
                    self._copy_pending[span._context[1]] = mine
        except Exception as exc:
            self._fail("_on_ending", exc)

    def on_end(self, span: ReadableSpan) -> None:
        # Inline analysis on the copy route (see _bind for the other modes). This runs for
        # every span: a plain span that is not a local root costs a look at its attribute
        # keys and one dict lookup. (The forwarding is _forward_end's, written out.)
        out = span
        try:
            parent = span._parent
            if (parent is not None and not parent[2]
                    and _CLASSIFY_KEYS.isdisjoint(span._attributes._dict)):  # type: ignore[attr-defined]
                # A plain span: forget it if it was inside a run.
                entry = self._spans.pop(span._context[1], None)
                if entry is not None and entry[2] != _OTHER:
                    out = self._annotated(span, entry)  # the attribute limit dropped its key
            else:
                out = self._annotated(span)
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

    def _on_end_after_ending(self, span: ReadableSpan) -> None:
        """``on_end`` when annotating in place: the work was done in ``_on_ending``; a
        span the SDK did not let it change gets an annotated copy."""
        out = span
        if self._copy_pending:
            try:
                mine = self._copy_pending.pop(span._context[1], None)
                if mine:
                    out = _annotated_copy(span, mine)
            except Exception as exc:
                self._fail("on_end", exc)
        self._forward_end(out)

    def shutdown(self, timeout_millis: int = 30000) -> None:
        """Shut the wrapped processors down; with background analysis, first let the
        worker finish what is queued (within ``timeout_millis``; past it, the remaining
        spans are handed over unanalysed) and analyse later spans inline."""
        if self._background:
            self._stop_background(time.monotonic() + timeout_millis / 1000.0)
        for inner in self._inners:
            try:
                inner.shutdown()
            except Exception as exc:
                self._fail("wrapped shutdown", exc)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """With background analysis, wait for the worker to process every span that
        ended before the call; then flush the wrapped processors, within the same
        ``timeout_millis`` overall. False if any part did not finish in time."""
        deadline = time.monotonic() + timeout_millis / 1000.0
        ok = self._drain(deadline) if self._background else True
        for inner in self._inners:
            left = max(0, int((deadline - time.monotonic()) * 1000))
            try:
                ok = bool(inner.force_flush(left)) and ok
            except Exception as exc:
                self._fail("wrapped force_flush", exc)
                ok = False
        return ok

    def _forward_start(self, span: Span, parent_context: Context | None = None) -> None:
        for proc in self._starters:
            try:
                proc.on_start(span, parent_context=parent_context)
            except Exception as exc:
                self._fail("wrapped on_start", exc)

    def _forward_end(self, span: ReadableSpan) -> None:
        inner = self._inner_end
        if inner is not None:
            try:
                inner(span)
            except Exception as exc:
                self._fail("wrapped on_end", exc)
            return
        for proc in self._inners:
            try:
                proc.on_end(span)
            except Exception as exc:
                self._fail("wrapped on_end", exc)

    # -- background analysis: the threads that start and end spans ---------------------

    def _queue_start(self, span: Span, parent_context: Context | None = None) -> None:
        """``on_start`` with background analysis: forward, then queue what the worker
        needs of a span the inline mode would register (a snapshot: the attributes may
        still change). Plain spans outside any run are not queued."""
        if self._starters:
            self._forward_start(span, parent_context)
        try:
            attrs = span._attributes._dict  # type: ignore[attr-defined]
            parent = span._parent
            if _CLASSIFY_KEYS.isdisjoint(attrs):
                if parent is None or parent[2]:  # a local root: the worker keeps it for its trace
                    self._put((_START, span, _PLAIN, span._name))
                    return
                if parent[1] not in self._watched:
                    return  # outside any run: nothing to remember
                snapshot = _PLAIN
            else:
                snapshot = dict(attrs)
            watched = self._watched
            watched[span._context[1]] = True
            if len(watched) > self._max_spans:
                _trim(watched, self._max_spans)
            q = self._q
            if len(q.items) < q.wake_at and q.thread is not None:
                q.items.append((_START, span, snapshot, span._name))  # _put's common case
            else:
                self._put((_START, span, snapshot, span._name))
        except Exception as exc:
            self._fail("on_start", exc)

    def _queue_end(self, span: ReadableSpan) -> None:
        """``on_end`` with background analysis: queue the ended span (it no longer
        changes) behind everything queued before it. A plain span outside any run goes
        straight to the wrapped processors when no span end is waiting for the worker
        (queued starts do not matter: they hand nothing over)."""
        try:
            parent = span._parent
            root = parent is None or parent[2]
            plain = _CLASSIFY_KEYS.isdisjoint(span._attributes._dict)  # type: ignore[attr-defined]
            q = self._q
            if self._watched.pop(span._context[1], False) or root or not plain or q.ends:
                q.ends.append(None)
                if len(q.items) < q.wake_at and q.thread is not None:
                    q.items.append((_END, span))  # _put's common case
                else:
                    self._put((_END, span))
                return
        except Exception as exc:
            self._fail("on_end", exc)
        inner = self._inner_end  # (_forward_end, written out: most spans take this path)
        if inner is not None:
            try:
                inner(span)
            except Exception as exc:
                self._fail("wrapped on_end", exc)
        else:
            self._forward_end(span)

    def _put(self, item: tuple[Any, ...]) -> None:
        """Queue an item for the worker (which polls the queue), starting it on first
        use, waking it if the queue is filling up. Raises nothing once the item is queued.
        (The ending threads append directly while the worker runs and the queue is below
        ``wake_at``: then there is nothing else to do.)"""
        q = self._q
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
            self._metrics.queue_full("overflow")
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
        self._metrics.queue_full("waited" if ok else "overflow")

    def _start_worker(self, q: _Queue) -> None:
        with q.start_lock:
            if q.thread is not None:
                return
            thread = threading.Thread(target=_analysis_worker, args=(weakref.ref(self), q),
                                      name="OtelProgressAnalysis", daemon=True)
            try:
                thread.start()
            except Exception as exc:  # no new threads (interpreter shutdown): do it here
                self._fail("start analysis worker", exc)
                with q.busy:
                    while q.items:
                        self._process(q.items.popleft())
                return
            q.ident = thread.ident
            q.thread = thread

    def _drain(self, deadline: float) -> bool:
        """Wait until the worker processed everything queued so far; False if the
        deadline passed first, or if this is the worker itself (a hook flushing)."""
        q = self._q
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

    def _stop_background(self, deadline: float) -> None:
        q = self._q
        if self._at_exit is not None:
            atexit.unregister(self._at_exit)
        drained = self._drain(deadline)
        # From here on, spans are analysed inline, on the threads that end them.
        self._background = False
        self.__dict__.pop("on_start", None)
        self.__dict__.pop("on_end", None)
        q.stopping = True
        q.ring()
        thread = q.thread
        if thread is not None and thread.ident != threading.get_ident():
            thread.join(max(0.0, deadline - time.monotonic()))
        if thread is None or not thread.is_alive():
            with q.busy:  # items queued while the switch happened
                while q.items:
                    self._process(q.items.popleft())
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

    # -- background analysis: the worker ------------------------------------------------

    def _work(self) -> bool:
        """Process everything queued, in order; False once the processor is shut down."""
        q = self._q
        q.ident = threading.get_ident()
        items = q.items
        process = self._process
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

    def _process(self, item: tuple[Any, ...]) -> None:
        """What the inline mode does in ``on_start`` or ``on_end``, for one queued item."""
        kind = item[0]
        if kind == _END:
            out = span = item[1]
            try:
                out = self._analysed(span)
            except Exception as exc:
                self._fail("on_end", exc)
            self._forward_end(out)
            ends = self._q.ends
            if ends:  # (a token is queued before each end: always)
                ends.pop()
        elif kind == _START:
            try:
                self._observe_start(item[1], item[2], item[3])
            except Exception as exc:
                self._fail("on_start", exc)
        else:
            item[1].set()

    # -- the work -----------------------------------------------------------------------

    def _observe_start(self, span: Span, attrs: Mapping[str, Any], name: str) -> None:
        """A span starts, with these attributes and name: register it if it is a tool,
        agent or model call, or inside a run; remember a local root."""
        parent = span._parent
        plain = _CLASSIFY_KEYS.isdisjoint(attrs)
        if parent is None or parent[2]:
            self._roots[span._context[0]] = span
            if plain:
                return
            cp = _NO_CTX
        else:
            entry = self._spans.get(parent[1])
            if entry is None:
                if plain:
                    return  # outside any run: nothing to remember
                cp = _NO_CTX
            else:
                cp = entry[0]
            if plain:
                self._register_plain(span._context[1], cp, name)
                return
        self._start(span, attrs, cp, name)

    def _register_plain(self, span_id: int, cp: _Ctx, name: str) -> None:
        """A plain span starts inside a run (or a tool call), under a parent that passes
        ``cp``: its children get the same, with this span as their plan node."""
        spans = self._spans
        spans[span_id] = ((cp[0], name, cp[2]), cp, _OTHER)
        if len(spans) > self._max_spans:
            self._trim_spans()

    def _analysed(self, span: ReadableSpan) -> ReadableSpan:
        """Feed an ended span to the engine (copy route); return what the wrapped
        processors get: the span, or an annotated copy."""
        parent = span._parent
        if (parent is not None and not parent[2]
                and _CLASSIFY_KEYS.isdisjoint(span._attributes._dict)):  # type: ignore[attr-defined]
            entry = self._spans.pop(span._context[1], None)  # a plain span (see on_end)
            if entry is None or entry[2] == _OTHER:
                return span
            return self._annotated(span, entry)
        return self._annotated(span)

    def _annotated(self, span: ReadableSpan, entry: tuple[_Ctx, _Ctx, int] | None = None) -> ReadableSpan:
        """``_analysed`` past its shortcut for plain spans (``entry``: the span's open-span
        entry if it was taken out already)."""
        mine = self._end(span, entry)
        late = self._late.pop(span._context[1], None) if self._late else None
        if not self._inners or not ((mine and self._annotate_tools) or late):
            return span
        return _annotated_copy(span, (mine or ()) if self._annotate_tools else (), late or ())

    def _start(self, span: Span, attrs: Mapping[str, Any], cp: _Ctx, name: str) -> None:
        """A tool, agent or model span starts (or a plain span inside a tool call)."""
        kind = _kind(attrs)
        ctx = span._context
        if kind == _TOOL:
            cs: _Ctx = (cp[0], cp[1], True)
            if not cp[2]:
                with self._lock:
                    self._run_for(ctx[0], cp).open_tools += 1
        elif kind == _AGENT:
            run = _Run(format(ctx[1], "016x"),
                       agent_name(SpanRecord("", "", name=name, attributes=attrs)), span)
            with self._lock:
                trace = self._trace(ctx[0])
                trace.runs[run.hex] = run
                trace.open_agents += 1
            cs = (run, None, False)
        elif kind == _MODEL:  # the previous tool batch of its run is complete
            cs = (cp[0], name, cp[2])
            run_hex = cp[0].hex if cp[0] is not None else ""
            dets = self._engine.flush(format(ctx[0], "032x"), run_hex)
            if dets:
                self._deliver(dets, ctx[0], "", span.start_time)
        else:
            cs = (cp[0], name, cp[2])
        spans = self._spans
        spans[ctx[1]] = (cs, cp, kind)
        if len(spans) > self._max_spans:
            self._trim_spans()

    def _end(self, span: ReadableSpan, entry: tuple[_Ctx, _Ctx, int] | None = None) -> list[Detection] | None:
        """Process an ending span; return the detections that belong on it (``entry``:
        its open-span entry, if the caller took it out of the table already)."""
        ctx = span._context
        if entry is None:
            entry = self._spans.pop(ctx[1], None)
        attrs = span._attributes._dict  # type: ignore[attr-defined]
        plain = _CLASSIFY_KEYS.isdisjoint(attrs)
        parent = span._parent
        root = parent is None or parent[2]
        if plain and (entry is None or entry[2] == _OTHER):
            if root and self._roots.pop(ctx[0], None) is not None and ctx[0] in self._traces:
                return self._end_root(ctx[0])
            return None
        kind = _OTHER if plain else _kind(attrs)
        if entry is None:
            start_kind = _OTHER
            if root:
                cp = _NO_CTX
            else:
                pentry = self._spans.get(parent[1])
                cp = pentry[0] if pentry is not None else _NO_CTX
        else:
            cp, start_kind = entry[1], entry[2]
            if kind == _OTHER:
                kind = start_kind
        if kind == _TOOL:
            mine = self._end_tool(span, attrs, cp, start_kind == _TOOL)
        elif kind == _AGENT:
            mine = self._end_agent(span, cp, start_kind == _AGENT)
        elif kind == _MODEL:
            mine = self._end_model(span, attrs, cp, start_kind == _MODEL)
        else:
            mine = None
        if root:
            self._roots.pop(ctx[0], None)
            more = self._end_root(ctx[0])
            if more:
                mine = (mine or []) + more
        return mine

    def _end_tool(self, span: ReadableSpan, attrs: Mapping[str, Any], cp: _Ctx,
                  counted: bool) -> list[Detection] | None:
        if cp[2]:
            return None  # nested in another tool call: counted once, as the outer call
        trace_id = span._context[0]
        record = _record(span, attrs)
        with self._lock:
            run = self._run_for(trace_id, cp)
            if counted:
                run.open_tools -= 1
            call = read_tool_call(record, run_id=run.hex, agent=run.agent, node=cp[1])
            dets = self._engine.observe(call, flush=run.open_tools <= 0)
            self._maybe_evict()
            if self._engine.stats.runs_evicted != self._evicted_reported:
                self._report_evictions()
        if not dets:
            return None
        return self._deliver(dets, trace_id, record.span_id, span.end_time)

    def _end_model(self, span: ReadableSpan, attrs: Mapping[str, Any], cp: _Ctx,
                   flushed: bool) -> list[Detection] | None:
        ctx = span._context
        trace_hex = format(ctx[0], "032x")
        run_hex = cp[0].hex if cp[0] is not None else ""
        dets = [] if flushed else self._engine.flush(trace_hex, run_hex)
        tokens = read_tokens(SpanRecord("", "", attributes=attrs))
        if tokens > 0:
            with self._lock:
                self._trace(ctx[0])  # so that the trace's end frees the engine's state
                self._engine.record_tokens(trace_hex, run_hex, tokens)
        if not dets:
            return None
        return self._deliver(dets, ctx[0], format(ctx[1], "016x"), span.end_time)

    def _end_agent(self, span: ReadableSpan, cp: _Ctx, started_as_agent: bool) -> list[Detection] | None:
        ctx = span._context
        sid_hex = format(ctx[1], "016x")
        trace_hex = format(ctx[0], "032x")
        parent_run = cp[0].hex if cp[0] is not None else ""
        with self._lock:
            summary = self._engine.end_run(trace_hex, sid_hex, span_id=sid_hex, parent_run_id=parent_run)
        dets = list(summary.detections_list) if summary is not None else []
        mine = self._deliver(dets, ctx[0], sid_hex, span.end_time) if dets else None
        with self._lock:
            trace = self._traces.get(ctx[0])
            if trace is not None and started_as_agent and trace.runs.pop(sid_hex, None) is not None:
                trace.open_agents -= 1
            # the last agent run of a trace whose local root already ended: end the trace
            orphan = (trace is not None and trace.open_agents <= 0 and ctx[0] not in self._roots
                      and not (span._parent is None or span._parent[2]))
        if summary is not None:
            self._summarised((summary,))
        if orphan:
            more = self._end_root(ctx[0])
            if more:
                mine = (mine or []) + more
        return mine

    def _end_root(self, trace_id: int) -> list[Detection] | None:
        """The trace's local root span ended: end its runs if no agent run is still open."""
        with self._lock:
            trace = self._traces.get(trace_id)
            if trace is None or trace.open_agents > 0:
                return None
            del self._traces[trace_id]
            summaries = self._engine.end_trace(trace.hex)
        self._summarised(summaries)
        dets = [d for s in summaries for d in s.detections_list]
        for det in dets:
            self._emit(det)
        # Their runs are over: the ending root span is where they can still be seen.
        return dets or None

    def _summarised(self, summaries: Iterable[RunSummary]) -> None:
        for summary in summaries:
            if summary.first_detection_turn is not None:
                self._metrics.wasted(summary.agent, summary.wasted_turns, summary.wasted_tokens)

    # -- helpers (called with self._lock held where noted) ------------------------------

    def _trace(self, trace_id: int) -> _Trace:
        """The trace's state, created on first use (lock held)."""
        now = time.monotonic()
        trace = self._traces.get(trace_id)
        if trace is None:
            trace = self._traces[trace_id] = _Trace(format(trace_id, "032x"), now)
            if len(self._traces) > self._config.max_runs:
                self._traces.popitem(last=False)
        else:
            trace.last_seen = now
            self._traces.move_to_end(trace_id)
        return trace

    def _run_for(self, trace_id: int, cp: _Ctx) -> _Run:
        """The run of a span whose parent passes ``cp``: its agent's run, or the
        trace's calls outside any agent (lock held)."""
        trace = self._trace(trace_id)
        run = cp[0]
        if run is not None:
            return run  # type: ignore[no-any-return]
        run = trace.runs.get("")
        if run is None:
            run = trace.runs[""] = _Run("", None, self._roots.get(trace_id))
        return run

    def _maybe_evict(self) -> None:
        """Drop idle traces, here and in the engine (lock held)."""
        now = time.monotonic()
        if now < self._next_evict:
            return
        self._next_evict = now + _EVICT_EVERY_SECONDS
        self._engine.evict_idle(now)
        limit = now - self._config.run_ttl_seconds
        while self._traces:
            trace = next(iter(self._traces.values()))
            if trace.last_seen > limit:
                break
            self._traces.popitem(last=False)
            self._roots.pop(int(trace.hex, 16), None)
        self._report_evictions()

    def _report_evictions(self) -> None:
        """Count the runs the engine dropped since the last report (lock held)."""
        evicted = self._engine.stats.runs_evicted
        if evicted > self._evicted_reported:
            self._metrics.runs_evicted(evicted - self._evicted_reported)
        self._evicted_reported = evicted

    def _trim_spans(self) -> None:
        """Forget the oldest tenth of the open-span tables (spans that never ended)."""
        with self._lock:
            for table in (self._spans, self._roots):
                if len(table) > self._max_spans:
                    _trim(table, self._max_spans)

    def _deliver(self, dets: list[Detection], trace_id: int, current: str,
                 when: int | None) -> list[Detection] | None:
        """Annotate the runs' open spans (events at ``when``, the time of the span that
        brought the detections), count, call the hook; return the detections that belong
        on the span ``current`` (hex id), which is ending."""
        mine: list[Detection] = []
        for det in dets:
            if det.span_id == current:
                mine.append(det)
            if self._annotate_agents:
                with self._lock:
                    trace = self._traces.get(trace_id)
                    run = trace.runs.get(det.run_id) if trace is not None else None
                    target = run.span if run is not None else None
                if target is not None and format(target.context.span_id, "016x") != current:
                    try:
                        if not _annotate_live(target, (det,), when) or (
                                self._background and not target.is_recording()):
                            self._annotate_late(target, det, when, trace_id)
                    except Exception as exc:
                        self._fail("annotate agent span", exc)
            self._emit(det)
        return mine or None

    def _annotate_late(self, target: Span, det: Detection, when: int | None, trace_id: int) -> None:
        """Background analysis: the agent (or root) span had ended, or ended while it was
        being annotated, before the worker got to this detection. Its end is still queued
        behind the current item (its run, or the root, is still known), so the copy
        handed to the wrapped processors gets the detection: the exported span is the
        one the inline mode exports. (Without a wrapped processor, it is lost.)"""
        if not (self._background and self._inners):
            return
        if det.run_id == "" and self._roots.get(trace_id) is not target:
            return  # the root's end was processed already
        late = self._late
        late.setdefault(target.context.span_id, []).append((det, when))
        if len(late) > _MAX_LATE:
            del late[next(iter(late))]

    def _emit(self, det: Detection) -> None:
        self._metrics.detection(det)
        hook = self._hook
        if hook is None:
            return
        try:
            hook(det)
        except Exception as exc:
            self.hook_errors += 1
            self._metrics.hook_error(type(exc).__name__)
            self._log_once("on_detection hook", exc)

    def _fail(self, where: str, exc: BaseException) -> None:
        self.processor_errors += 1
        self._metrics.error(type(exc).__name__)
        self._log_once(where, exc)

    def _log_once(self, where: str, exc: BaseException) -> None:
        key = (where, type(exc).__name__)
        now = time.monotonic()
        if now < self._logged.get(key, 0.0):
            return
        self._logged[key] = now + _LOG_EVERY_SECONDS
        _log.warning(
            "otel-progress: %s raised %s (caught; the application is unaffected; further"
            " errors of this kind are counted and logged at most every %d s)",
            where, type(exc).__name__, int(_LOG_EVERY_SECONDS), exc_info=exc,
        )


def _trim(table: dict[int, Any], limit: int) -> None:
    """Forget the oldest tenth of a table of open spans."""
    try:
        stale = list(islice(table, max(1, limit // 10)))
    except RuntimeError:  # resized by another thread: next time
        return
    for key in stale:
        table.pop(key, None)


def _noop(span: Any) -> None:
    return None
