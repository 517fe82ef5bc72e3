"""``ProgressSpanProcessor``: the SDK's ``SpanProcessor`` interface around the tracker.

It forwards every call to the processors it wraps, feeds span starts and ends to the
:class:`~otel_progress.runs.live.RunTracker` (on the application's thread, or through the
:class:`~.handoff.BackgroundAnalysis` worker), and puts what the engine detects on the
spans (:mod:`.annotation`), into the metrics and to the ``on_detection`` hook. Every
error is caught, counted and logged at most once per five minutes per kind: nothing is
raised into the application.
"""

from __future__ import annotations

import atexit
import logging
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from ..engine import ProgressEngine
from ..engine.config import Config
from ..model import Detection
from ..runs.live import RunTracker
from ..runs.livetables import CLASSIFY_KEYS, OTHER, Entry
from ..runs.model import RunModel
from .annotation import annotate_live, annotated_copy
from .content import ContentWatch
from .handoff import BackgroundAnalysis
from .log_events import DetectionLogger, detection_events_mode, plan
from .metrics import ProgressMetrics
from .modes import ANALYSIS_MODES, ENV_ANALYSIS, analysis_mode, register_process_hooks, resolve_mode
from .sdk import (
    NOOP_ON_START,
    SHAPE_ERRORS,
    live_attributes,
    local_parent,
    probe,
    public_fields,
    record,
    scope_name,
    span_fields,
)

__all__ = ["ANALYSIS_MODES", "ENV_ANALYSIS", "DetectionHook", "ProgressSpanProcessor", "analysis_mode"]

_log = logging.getLogger("otel_progress.processor")

DetectionHook = Callable[[Detection], Any]

_LOG_EVERY_SECONDS = 300.0
_MAX_LATE = 4096  # agent spans awaiting a late annotation (see _annotate_late)


def _noop(span: Any) -> None:
    return None


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
        max_spans: open spans tracked at once, per table (the oldest are dropped first).
        use_on_ending: force (True) or forbid (False) annotating in ``_on_ending``;
            default: probe the SDK once. Inline analysis only.
        analysis: ``"inline"`` (analyse in ``span.end()``), ``"background"`` (queue
            the span; a worker thread analyses, annotates and forwards it, in order) or
            ``"auto"``: background when the processor wraps the exporting processor(s)
            and no ``on_detection`` hook is given; inline otherwise. Default:
            ``OTEL_PROGRESS_ANALYSIS``, else ``"auto"``.
        max_queue_size: background analysis: queued span starts and ends at most. A
            thread ending a span while the queue is full waits for room (at most a
            second, then queues past the bound); nothing is dropped.
        detection_events: ``"span"`` (span events and attributes), ``"log"`` (each
            detection as a ``gen_ai.evaluation.result`` log record in the span's context,
            spans left alone) or ``"both"``. Default: ``OTEL_PROGRESS_DETECTION_EVENTS``,
            else ``"both"``. See :mod:`.log_events`.
        logger_provider: for the log records; default the global provider.
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
        detection_events: str | None = None,
        logger_provider: Any = None,
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
        self._log_events, annotate_tool_spans, annotate_agent_spans = plan(
            detection_events_mode(detection_events), logger_provider, annotate_tool_spans, annotate_agent_spans,
            self._fail)
        self._annotate_tools = annotate_tool_spans
        self._annotate_agents = annotate_agent_spans
        self._max_spans = max(16, int(max_spans))
        self._max_queue_size = max(1, int(max_queue_size))
        mutable, layout = probe()
        # Where the SDK's spans are not laid out as the fast paths expect, every span is
        # read through its public API (slower, same results).
        self._public = not layout
        mode = resolve_mode(mode, hook=on_detection is not None, wraps=bool(inners), use_on_ending=use_on_ending)
        # Background analysis annotates copies (the worker gets the span after _on_ending).
        self._background = mode == "background"
        self._ending = not self._background and (mutable if use_on_ending is None else bool(use_on_ending))
        # Nothing long-lived (the meter provider's callbacks, the fork hook, the worker)
        # holds the processor: once the application drops it, its worker thread ends.
        ref = weakref.ref(self)

        def active_runs() -> int:
            processor = ref()
            return processor._engine.active_runs if processor is not None else 0

        def queued() -> int:
            processor = ref()
            return len(processor._handoff) if processor is not None and processor._handoff is not None else 0

        self._metrics = ProgressMetrics(meter_provider, active_runs=active_runs,
                                        queued=queued if self._background else None)
        self.processor_errors = 0
        self.hook_errors = 0
        self._logged: dict[tuple[str, str], float] = {}
        self._content = ContentWatch()
        self._handoff: BackgroundAnalysis | None = None
        self._init_state()
        self._at_exit: Callable[[], None] | None = None
        register_process_hooks(ref)

    # -- state ------------------------------------------------------------------------

    def _init_state(self) -> None:
        """Fresh tables (at construction, and in a forked child), and the paths a span
        takes, chosen once so that it pays no extra indirection."""
        self._copy_pending: dict[int, list[Detection]] = {}
        # Background analysis: detections for agent (or root) spans that had ended before
        # the worker got to them, keyed by span id: added to the copy.
        self._late: dict[int, list[tuple[Detection, int | None]]] = {}
        inners = self._inners
        # The exporting processors' on_start does nothing: a span start is not forwarded
        # to them (one Python call less on every span).
        self._starters = tuple(p for p in inners if type(p).on_start not in NOOP_ON_START)
        self._inner_end = inners[0].on_end if len(inners) == 1 else None
        for name in ("on_start", "on_end", "_on_ending"):
            self.__dict__.pop(name, None)
        self._handoff = None
        if self._background:
            self._handoff = BackgroundAnalysis(
                self._max_queue_size, self._max_spans,
                forward_start=self._forward_start if self._starters else None,
                forward_end=self._forward_end, inner_end=self._inner_end,
                analyse_start=self._analyse_start, analyse_end=self._analysed,
                fail=self._fail, queue_full=self._metrics.queue_full, forget=self._forget_dropped)
            self.on_start = self._handoff.on_start  # type: ignore[method-assign]
            self.on_end = self._handoff.on_end  # type: ignore[method-assign]
        self._tracker = RunTracker(
            RunModel(self._engine, on_summary=self._summarised), self._config, self._max_spans,
            deliver=self._deliver, emit=self._emit, evicted=self._metrics.runs_evicted,
            tool_call=self._tool_call_seen, on_dead=self._handoff.dropped if self._handoff is not None else None,
            record=record, attributes=live_attributes)
        self._spans = self._tracker.spans  # (the same table: one attribute lookup less on every span)
        if self._public and not self._background:
            self.on_start = self._on_start_public  # type: ignore[method-assign]
            self.on_end = self._on_end_public  # type: ignore[method-assign]
        if self._ending:
            self.on_end = self._on_end_after_ending  # type: ignore[method-assign]
            return
        # Nothing to do in _on_ending: hand the call straight to the wrapped processor.
        ending = getattr(inners[0], "_on_ending", None) if len(inners) == 1 else None
        if len(inners) == 1 and callable(ending):
            self._on_ending = ending  # type: ignore[method-assign]
        elif not inners:
            self._on_ending = _noop  # type: ignore[method-assign]
        else:
            self._on_ending = self._forward_on_ending  # type: ignore[method-assign]

    def _forget_dropped(self, ref: Any) -> None:
        self._tracker.forget(ref)

    def _after_fork_in_child(self) -> None:
        # Other threads' locks may have been held at fork time: start afresh. The
        # parent's queued spans are the parent's to export; the child's worker starts
        # with the child's first span.
        if not self._engine_given:
            self._engine = ProgressEngine(self._config)
        self._init_state()

    def _forward_on_ending(self, span: Span) -> None:
        for inner in self._inners:
            try:
                ending = getattr(inner, "_on_ending", None)
                if ending is not None:
                    ending(span)
            except Exception as exc:
                self._fail("wrapped _on_ending", exc)

    # -- properties ---------------------------------------------------------------------

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
    def log_events(self) -> DetectionLogger | None:
        """What emits the detections as log records (None: ``detection_events="span"``)."""
        return self._log_events

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
        return len(self._handoff) if self._handoff is not None else 0

    @property
    def open_spans(self) -> int:
        """Open spans the processor tracks (those inside a run or a tool call, and local
        roots). With background analysis, this and the other figures are the worker's:
        call ``force_flush()`` first for figures that include every ended span."""
        return len(self._tracker.spans) + len(self._tracker.roots)

    @property
    def tracked_traces(self) -> int:
        """Traces with per-run state held by the processor."""
        return len(self._tracker.traces)

    @property
    def _q(self) -> Any:
        """The background queue (tests look at its worker thread and bound)."""
        handoff = self._handoff
        if handoff is None:
            handoff = BackgroundAnalysis(self._max_queue_size, self._max_spans, None, _noop, None,
                                         lambda *a: None, lambda *a: None, self._fail, _noop)
        return handoff.q

    # -- SpanProcessor ----------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        # Inline analysis (see _init_state for the other modes). This runs for every span.
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

    def _on_start_public(self, span: Span, parent_context: Context | None = None) -> None:
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

    def _analyse_start(self, span: Any, attrs: Mapping[str, Any], name: str, parent_span: Any) -> None:
        """A span start, on the worker (``attrs`` and ``name``: as they were at start)."""
        tid, sid, parent, _, _ = span_fields(span)
        self._tracker.start(span, tid, sid, parent, attrs, name, parent_span)

    def _on_ending(self, span: Span) -> None:
        # Reached only when annotating in place (see _init_state).
        self._forward_on_ending(span)
        try:
            tid, sid, parent, attrs, _ = span_fields(span)
            mine = self._tracker.end(span, tid, sid, parent, attrs, current=self._current(attrs, sid))
            if mine and self._annotate_tools:
                annotate_live(span, mine, span.end_time)
                if (span.attributes or {}).get("progress.detected") is not True:
                    # The SDK did not keep the change after all: fall back to the copy.
                    self._copy_pending[sid] = mine
        except Exception as exc:
            self._fail("_on_ending", exc)

    def on_end(self, span: ReadableSpan) -> None:
        # Inline analysis on the copy route (see _init_state for the other modes). This
        # runs for every span: a plain span that is not a local root costs a look at its
        # attribute keys and one dict lookup. (The forwarding is _forward_end's, written out.)
        out = span
        try:
            try:
                parent = span._parent
                plain = CLASSIFY_KEYS.isdisjoint(span._attributes._dict)  # type: ignore[attr-defined]
                sid = span._context[1]
            except SHAPE_ERRORS:
                out = self._analysed_public(span)
                parent, plain = None, False
            if parent is not None and not parent[2] and plain:
                # A plain span: forget it if it was inside a run.
                entry = self._spans.pop(sid, None)
                if entry is not None and entry[2] != OTHER:
                    out = self._annotated(span, entry)  # the attribute limit dropped its key
            elif out is span:
                out = self._analysed(span, None)
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

    def _on_end_public(self, span: ReadableSpan) -> None:
        """``on_end`` for an SDK whose spans are not laid out as the fast path expects."""
        out = span
        try:
            out = self._analysed_public(span)
        except Exception as exc:
            self._fail("on_end", exc)
        self._forward_end(out)

    def _on_end_after_ending(self, span: ReadableSpan) -> None:
        """``on_end`` when annotating in place: the work was done in ``_on_ending``; a
        span the SDK did not let it change gets an annotated copy."""
        out = span
        if self._copy_pending:
            try:
                mine = self._copy_pending.pop(span_fields(span)[1], None)
                if mine:
                    out = annotated_copy(span, mine)
            except Exception as exc:
                self._fail("on_end", exc)
        self._forward_end(out)

    def shutdown(self, timeout_millis: int = 30000) -> None:
        """Shut the wrapped processors down; with background analysis, first let the
        worker finish what is queued (within ``timeout_millis``; past it, the remaining
        spans are handed over unanalysed) and analyse later spans inline."""
        handoff = self._handoff
        if self._background and handoff is not None:
            deadline = time.monotonic() + timeout_millis / 1000.0
            if self._at_exit is not None:
                atexit.unregister(self._at_exit)
            drained = handoff.drain(deadline)
            # From here on, spans are analysed inline, on the threads that end them.
            self._background = False
            self.__dict__.pop("on_start", None)
            self.__dict__.pop("on_end", None)
            if self._public:
                self.on_start = self._on_start_public  # type: ignore[method-assign]
                self.on_end = self._on_end_public  # type: ignore[method-assign]
            handoff.stop(deadline, drained)
        self._end_grouped_runs()
        for inner in self._inners:
            try:
                inner.shutdown()
            except Exception as exc:
                self._fail("wrapped shutdown", exc)

    def _end_grouped_runs(self) -> None:
        """Shutting down: the grouped runs still open end here (an explicit end), counted
        and summarised like any run."""
        try:
            with self._tracker.lock:
                dets = self._tracker.end_groups()
            for det in dets:
                self._emit(det)
        except Exception as exc:
            self._fail("shutdown", exc)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """With background analysis, wait for the worker to process every span that
        ended before the call; then flush the wrapped processors, within the same
        ``timeout_millis`` overall. False if any part did not finish in time."""
        deadline = time.monotonic() + timeout_millis / 1000.0
        handoff = self._handoff
        ok = handoff.drain(deadline) if self._background and handoff is not None else True
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

    # -- the work -----------------------------------------------------------------------

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
        """``_analysed`` for a span whose own fields are not what the fast path reads."""
        return self._annotated(span, None, public_fields(span))

    def _analysed(self, span: ReadableSpan, current: Any = None) -> ReadableSpan:
        """Feed an ended span to the engine (copy route); return what the wrapped
        processors get: the span, or an annotated copy."""
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
        if entry is None and current is None and not self._background and sid not in self._spans:
            current = self._current(attrs, sid)
        mine = self._tracker.end(span, tid, sid, parent, attrs, entry, current)
        if not CLASSIFY_KEYS.isdisjoint(attrs):
            self._content.genai_span(tid, attrs, scope_name(span))
        if parent is None or parent[2]:
            self._content.run_ended(tid)
        late = self._late.pop(sid, None) if self._late else None
        if not self._inners or not ((mine and self._annotate_tools) or late):
            return span
        return annotated_copy(span, (mine or ()) if self._annotate_tools else (), late or ())

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
                target, target_id = self._tracker.run_span(trace_id, det.run_id)
                if target_id is not None and format(target_id, "016x") != current:
                    try:
                        # (a span that is gone was dropped by the application, or, in the
                        # background, it ended and only its ended copy is still queued)
                        if target is None or not annotate_live(target, (det,), when) or (
                                self._background and not target.is_recording()):
                            self._annotate_late(target_id, det, when, trace_id)
                    except Exception as exc:
                        self._fail("annotate agent span", exc)
            self._emit(det)
        return mine or None

    def _annotate_late(self, target_id: int, det: Detection, when: int | None, trace_id: int) -> None:
        """Background analysis: the agent (or root) span had ended, or ended while it was
        being annotated, before the worker got to this detection. Its end is still queued
        behind the current item (its run, or the root, is still known), so the copy
        handed to the wrapped processors gets the detection: the exported span is the
        one the inline mode exports. (Without a wrapped processor, it is lost.)"""
        if not (self._background and self._inners):
            return
        if det.run_id == "" and self._tracker.root_id(trace_id) != target_id:
            return  # the root's end was processed already
        late = self._late
        late.setdefault(target_id, []).append((det, when))
        if len(late) > _MAX_LATE:
            del late[next(iter(late))]

    def _summarised(self, summary: Any) -> None:
        """A run ended: its wasted turns and tokens, when it ended after a detection."""
        if summary.first_detection_turn is not None:
            self._metrics.wasted(summary.agent, summary.wasted_turns, summary.wasted_tokens)

    def _tool_call_seen(self, call: Any, span: Any, attrs: Mapping[str, Any]) -> None:
        context = getattr(span, "context", None)
        self._content.seen(call.captured, attrs, scope_name(span), getattr(context, "trace_id", None))

    def _emit(self, det: Detection) -> None:
        self._metrics.detection(det)
        if self._log_events is not None:
            self._log_events.emit(det)
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
