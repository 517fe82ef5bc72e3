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

Per-run state is keyed by the agent span (or the trace), freed when the agent span (or
the local root span) ends, dropped after ``run_ttl_seconds`` idle, and capped at
``max_runs`` (least recently used first). Open spans are tracked only while open, in a
table capped at ``max_spans``. Every error is caught, counted and logged at most once
per five minutes per kind: the processor never raises into the application.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import StatusCode

from .config import Config
from .engine import ProgressEngine, RunSummary
from .metrics import ProgressMetrics
from .model import Detection
from .spans import SpanKind, SpanRecord, agent_name, classify, read_tokens, read_tool_call

__all__ = ["DetectionHook", "ProgressSpanProcessor", "on_ending_is_mutable"]

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


def _annotated_copy(span: ReadableSpan, detections: Sequence[Detection]) -> ReadableSpan:
    """A copy of an ended span with the detections' events and span attributes added;
    the original's dropped counts are kept."""
    attributes = BoundedAttributes(None, span.attributes, immutable=False)
    events = BoundedList.from_seq(None, span.events)
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


def _annotate_live(span: Span, detections: Iterable[Detection]) -> bool:
    """Add the detections to a span that is still recording; False if it was not."""
    if not span.is_recording():
        return False
    for det in detections:
        span.add_event(det.event, det.event_attributes())
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
            texts included) on the thread that ended the span, after the annotation.
            Exceptions are caught and counted in ``progress.hook.errors``.
        meter_provider: for the metrics; default the global provider.
        annotate_tool_spans: put the event and attributes on the tool span.
        annotate_agent_spans: put the event on the run's open agent span (or the trace's
            local root span for calls outside any agent).
        max_spans: open spans tracked at once (the oldest are dropped first).
        use_on_ending: force (True) or forbid (False) annotating in ``_on_ending``;
            default: probe the SDK once.
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
    ) -> None:
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
        self._ending = layout and (mutable if use_on_ending is None else bool(use_on_ending))
        self._metrics = ProgressMetrics(meter_provider, active_runs=lambda: self._engine.active_runs)
        self.processor_errors = 0
        self.hook_errors = 0
        self._init_state()
        self._bind()
        ref = weakref.ref(self)

        def _after_fork() -> None:
            processor = ref()
            if processor is not None:
                processor._after_fork_in_child()

        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork)

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

    def _after_fork_in_child(self) -> None:
        # Other threads' locks may have been held at fork time: start afresh.
        if not self._engine_given:
            self._engine = ProgressEngine(self._config)
        self._init_state()

    def _bind(self) -> None:
        """Choose the forwarding paths once, so a span pays no extra indirection."""
        inners = self._inners
        self._inner_start = inners[0].on_start if len(inners) == 1 else None
        self._inner_end = inners[0].on_end if len(inners) == 1 else None
        if self._ending:
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
    def open_spans(self) -> int:
        """Open spans the processor tracks (those inside a run or a tool call)."""
        return len(self._spans) + len(self._roots)

    @property
    def tracked_traces(self) -> int:
        """Traces with per-run state held by the processor."""
        return len(self._traces)

    # -- SpanProcessor ----------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        inner = self._inner_start
        if inner is not None:
            try:
                inner(span, parent_context=parent_context)
            except Exception as exc:
                self._fail("wrapped on_start", exc)
        elif self._inners:
            for proc in self._inners:
                try:
                    proc.on_start(span, parent_context=parent_context)
                except Exception as exc:
                    self._fail("wrapped on_start", exc)
        if not self._active:
            return
        try:
            attrs = span._attributes._dict  # type: ignore[attr-defined]
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
                    spans = self._spans
                    spans[span._context[1]] = ((cp[0], span._name, cp[2]), cp, _OTHER)
                    if len(spans) > self._max_spans:
                        self._trim_spans()
                    return
            self._start(span, attrs, cp)
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
                _annotate_live(span, mine)
                if (span.attributes or {}).get("progress.detected") is not True:
                    # The SDK did not keep the change after all: fall back to the copy.
                    self._copy_pending[span._context[1]] = mine
        except Exception as exc:
            self._fail("_on_ending", exc)

    def on_end(self, span: ReadableSpan) -> None:
        out = span
        if self._active:
            try:
                if self._ending:
                    if self._copy_pending:
                        mine = self._copy_pending.pop(span._context[1], None)
                        if mine:
                            out = _annotated_copy(span, mine)
                elif (
                    span._context[1] in self._spans
                    or not _CLASSIFY_KEYS.isdisjoint(span._attributes._dict)  # type: ignore[attr-defined]
                    or (parent := span._parent) is None
                    or parent[2]
                ):  # (anything else is a plain span outside any run: nothing to do)
                    mine = self._end(span)
                    if mine and self._annotate_tools and self._inners:
                        out = _annotated_copy(span, mine)
            except Exception as exc:
                self._fail("on_end", exc)
        inner = self._inner_end
        if inner is not None:
            try:
                inner(out)
            except Exception as exc:
                self._fail("wrapped on_end", exc)
        elif self._inners:
            for proc in self._inners:
                try:
                    proc.on_end(out)
                except Exception as exc:
                    self._fail("wrapped on_end", exc)

    def shutdown(self) -> None:
        for inner in self._inners:
            try:
                inner.shutdown()
            except Exception as exc:
                self._fail("wrapped shutdown", exc)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        ok = True
        deadline = time.monotonic() + timeout_millis / 1000.0
        for inner in self._inners:
            left = max(0, int((deadline - time.monotonic()) * 1000))
            try:
                ok = bool(inner.force_flush(left)) and ok
            except Exception as exc:
                self._fail("wrapped force_flush", exc)
                ok = False
        return ok

    # -- the work -----------------------------------------------------------------------

    def _start(self, span: Span, attrs: Mapping[str, Any], cp: _Ctx) -> None:
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
                       agent_name(SpanRecord("", "", name=span._name, attributes=attrs)), span)
            with self._lock:
                trace = self._trace(ctx[0])
                trace.runs[run.hex] = run
                trace.open_agents += 1
            cs = (run, None, False)
        elif kind == _MODEL:  # the previous tool batch of its run is complete
            cs = (cp[0], span._name, cp[2])
            run_hex = cp[0].hex if cp[0] is not None else ""
            dets = self._engine.flush(format(ctx[0], "032x"), run_hex)
            if dets:
                self._deliver(dets, ctx[0], "")
        else:
            cs = (cp[0], span._name, cp[2])
        spans = self._spans
        spans[ctx[1]] = (cs, cp, kind)
        if len(spans) > self._max_spans:
            self._trim_spans()

    def _end(self, span: ReadableSpan) -> list[Detection] | None:
        """Process an ending span; return the detections that belong on it."""
        ctx = span._context
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
        return self._deliver(dets, trace_id, record.span_id)

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
        return self._deliver(dets, ctx[0], format(ctx[1], "016x"))

    def _end_agent(self, span: ReadableSpan, cp: _Ctx, started_as_agent: bool) -> list[Detection] | None:
        ctx = span._context
        sid_hex = format(ctx[1], "016x")
        trace_hex = format(ctx[0], "032x")
        parent_run = cp[0].hex if cp[0] is not None else ""
        with self._lock:
            summary = self._engine.end_run(trace_hex, sid_hex, span_id=sid_hex, parent_run_id=parent_run)
        dets = list(summary.detections_list) if summary is not None else []
        mine = self._deliver(dets, ctx[0], sid_hex) if dets else None
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
                if len(table) <= self._max_spans:
                    continue
                try:
                    stale = list(islice(table, max(1, self._max_spans // 10)))
                except RuntimeError:  # resized by another thread: next time
                    continue
                for key in stale:
                    table.pop(key, None)

    def _deliver(self, dets: list[Detection], trace_id: int, current: str) -> list[Detection] | None:
        """Annotate the runs' open spans, count, call the hook; return the detections that
        belong on the span ``current`` (hex id), which is ending."""
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
                        _annotate_live(target, (det,))
                    except Exception as exc:
                        self._fail("annotate agent span", exc)
            self._emit(det)
        return mine or None

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


def _noop(span: Any) -> None:
    return None
