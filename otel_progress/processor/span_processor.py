"""``ProgressSpanProcessor``: the SDK's ``SpanProcessor`` interface, wiring the parts.

It forwards every call to the processors it wraps (:mod:`.forwarding`), feeds span starts
and ends to the :class:`~otel_progress.runs.live.RunTracker` (:mod:`.analysis`: on the
application's thread, or through the :class:`~.handoff.BackgroundAnalysis` worker), and
puts what the engine detects on the spans (:mod:`.annotation`), into the metrics, the log
records and the ``on_detection`` hook (:mod:`.outlets`). Every error is caught, counted
and logged at most once per five minutes per kind (:mod:`.errors`): nothing is raised
into the application.
"""

from __future__ import annotations

import atexit
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from ..engine import ProgressEngine
from ..engine.config import Config
from ..runs.live import RunTracker
from ..runs.model import RunModel
from .analysis import SpanAnalysis
from .annotation import SpanAnnotator
from .content import ContentWatch
from .errors import CaughtErrors
from .forwarding import WrappedProcessors, as_processors
from .handoff import BackgroundAnalysis
from .log_events import DetectionLogger, detection_events_mode, plan
from .metrics import ProgressMetrics
from .modes import analysis_mode, register_process_hooks, resolve_mode
from .outlets import DetectionHook, DetectionOutlets
from .sdk import live_attributes, probe, record
from .ungrouped import UngroupedSetup

__all__ = ["ProgressSpanProcessor"]


def _noop(span: Any) -> None:
    return None


def _observers(ref: weakref.ReferenceType[ProgressSpanProcessor],
               background: bool) -> tuple[Callable[[], int], Callable[[], int] | None]:
    """The metrics' callbacks: active runs, and (background analysis) queued items. They
    hold the processor weakly."""

    def active_runs() -> int:
        processor = ref()
        return processor._engine.active_runs if processor is not None else 0

    def queued() -> int:
        processor = ref()
        return len(processor._handoff) if processor is not None and processor._handoff is not None else 0

    return active_runs, (queued if background else None)


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

    The processor wires parts with one job each: :class:`~.forwarding.WrappedProcessors`
    (the calls forwarded to the wrapped processors), :class:`~.analysis.SpanAnalysis`
    (span bookkeeping: starts and ends fed to the run tracker),
    :class:`~.annotation.SpanAnnotator` (the detections on the spans),
    :class:`~.outlets.DetectionOutlets` (metrics, log records, hook),
    :class:`~.errors.CaughtErrors` (error containment), with background analysis
    :class:`~.handoff.BackgroundAnalysis` (the queue and the worker), and the process
    hooks of :mod:`.modes` (fork, interpreter exit).
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
        self._inners = as_processors(span_processor)
        self._config = engine.config if engine is not None else (config or Config.from_env())
        self._engine_given = engine is not None
        self._engine = engine if engine is not None else ProgressEngine(self._config)
        events = detection_events_mode(detection_events)
        self._max_spans = max(16, int(max_spans))
        self._max_queue_size = max(1, int(max_queue_size))
        mutable, layout = probe()
        # Where the SDK's spans are not laid out as the fast paths expect, every span is
        # read through its public API (slower, same results).
        self._public = not layout
        mode = resolve_mode(mode, hook=on_detection is not None, wraps=bool(self._inners),
                            use_on_ending=use_on_ending)
        # Background analysis annotates copies (the worker gets the span after _on_ending).
        self._background = mode == "background"
        self._ending = not self._background and (mutable if use_on_ending is None else bool(use_on_ending))
        # Nothing long-lived (the meter provider's callbacks, the fork hook, the worker)
        # holds the processor: once the application drops it, its worker thread ends.
        ref = weakref.ref(self)
        active_runs, queued = _observers(ref, self._background)
        self._metrics = ProgressMetrics(meter_provider, active_runs=active_runs, queued=queued)
        self._errors = CaughtErrors(self._metrics)
        self._log_events, self._annotate_tools, self._annotate_agents = plan(
            events, logger_provider, annotate_tool_spans, annotate_agent_spans, self._errors.fail)
        self._outlets = DetectionOutlets(self._metrics, self._log_events, on_detection, self._errors)
        self._wrapped = WrappedProcessors(self._inners, self._errors.fail)
        self._content = ContentWatch()
        self._ungrouped = UngroupedSetup(self._metrics, then=self._content.tool_call)
        self._at_exit: Callable[[], None] | None = None
        self._wire()
        register_process_hooks(ref)

    # -- wiring -------------------------------------------------------------------------

    def _wire(self) -> None:
        """Fresh parts with fresh tables (at construction, and in a forked child), and the
        route a span takes."""
        wrapped, metrics, fail, emit = self._wrapped, self._metrics, self._errors.fail, self._outlets.emit
        annotator = SpanAnnotator(tools=self._annotate_tools, agents=self._annotate_agents, wraps=bool(self._inners),
                                  background=self._background, emit=emit, fail=fail)
        handoff: BackgroundAnalysis | None = None

        def dropped(span_ref: Any) -> None:  # (the worker, made below, needs the tracker)
            handoff.dropped(span_ref)  # type: ignore[union-attr]

        tracker = RunTracker(
            RunModel(self._engine, on_summary=metrics.run_summary), self._config, self._max_spans,
            deliver=annotator.deliver, emit=emit, evicted=metrics.runs_evicted, tool_call=self._ungrouped.tool_call,
            on_dead=dropped if self._background else None, record=record, attributes=live_attributes,
            model_output=self._content.model_output)
        annotator.runs = tracker
        analysis = SpanAnalysis(tracker, wrapped, annotator, self._content, fail, background=self._background)
        if self._background:
            handoff = BackgroundAnalysis(
                self._max_queue_size, self._max_spans,
                forward_start=wrapped.start if wrapped.starters else None,
                forward_end=wrapped.end, inner_end=wrapped.inner_end,
                analyse_start=analysis.analyse_start, analyse_end=analysis.analysed,
                fail=fail, queue_full=metrics.queue_full, forget=tracker.forget)
        self._tracker, self._annotator, self._analysis, self._handoff = tracker, annotator, analysis, handoff
        self._route()

    def _route(self) -> None:
        """Install the route of this mode as the instance's ``on_start``, ``on_end`` and
        ``_on_ending``, chosen once so that a span pays no extra indirection."""
        analysis, handoff = self._analysis, self._handoff
        if self._background and handoff is not None:
            self.on_start = handoff.on_start  # type: ignore[method-assign]
            self.on_end = handoff.on_end  # type: ignore[method-assign]
        elif self._public:
            self.on_start = analysis.on_start_public  # type: ignore[method-assign]
            self.on_end = analysis.on_end_public  # type: ignore[method-assign]
        else:
            self.on_start = analysis.on_start  # type: ignore[method-assign]
            self.on_end = analysis.on_end  # type: ignore[method-assign]
        if self._ending:
            self.on_end = analysis.on_end_after_ending  # type: ignore[method-assign]
            self._on_ending = analysis.on_ending  # type: ignore[method-assign]
        else:
            # Nothing to do in _on_ending: hand the call straight to the wrapped processor.
            self._on_ending = self._wrapped.ending_passthrough()  # type: ignore[method-assign]

    def _after_fork_in_child(self) -> None:
        # Other threads' locks may have been held at fork time: start afresh. The
        # parent's queued spans are the parent's to export; the child's worker starts
        # with the child's first span.
        if not self._engine_given:
            self._engine = ProgressEngine(self._config)
        self._wire()

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
    def processor_errors(self) -> int:
        """Errors caught inside the processor (its own, the engine's, a wrapped
        processor's)."""
        return self._errors.count

    @processor_errors.setter
    def processor_errors(self, value: int) -> None:
        self._errors.count = value

    @property
    def hook_errors(self) -> int:
        """Exceptions the ``on_detection`` hook raised (caught)."""
        return self._outlets.hook_errors

    @hook_errors.setter
    def hook_errors(self, value: int) -> None:
        self._outlets.hook_errors = value

    @property
    def _q(self) -> Any:
        """The background queue (tests look at its worker thread and bound)."""
        handoff = self._handoff
        if handoff is None:
            handoff = BackgroundAnalysis(self._max_queue_size, self._max_spans, None, _noop, None,
                                         lambda *a: None, lambda *a: None, self._errors.fail, _noop)
        return handoff.q

    # -- SpanProcessor ----------------------------------------------------------------
    # Each instance installs its mode's route over on_start, on_end and _on_ending (see
    # _route); these, reached only through the class, are the inline ones.

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._analysis.on_start(span, parent_context)

    def _on_ending(self, span: Span) -> None:
        self._analysis.on_ending(span)

    def on_end(self, span: ReadableSpan) -> None:
        self._analysis.on_end(span)

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
            self._background = self._analysis.background = self._annotator.background = False
            self._route()
            handoff.stop(deadline, drained)
        self._analysis.end_grouped_runs(self._outlets.emit)
        self._wrapped.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """With background analysis, wait for the worker to process every span that
        ended before the call; then flush the wrapped processors, within the same
        ``timeout_millis`` overall. False if any part did not finish in time."""
        deadline = time.monotonic() + timeout_millis / 1000.0
        handoff = self._handoff
        ok = handoff.drain(deadline) if self._background and handoff is not None else True
        return self._wrapped.force_flush(deadline) and ok
