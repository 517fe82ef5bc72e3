"""The run model: the one place that turns observations of spans and log records into runs
and feeds the engine. docs/runs.md describes it for users; this is the map of the code.

* :mod:`.identity`: which run an observation belongs to (its agent invocation, its trace,
  the conversation of a grouped run, a log reader's run key), its agent session, the
  evidence rank of a tool call;
* :mod:`.model`: :class:`RunModel`, every engine call of every adapter: tool ends, model
  starts and ends, agent ends, trace and grouped-run ends, one hook for every run that
  ends (its summary), and one loop reported once across signals (:mod:`.signals`);
* drivers, which decide when an observation is made and in which order:

  - :mod:`.live`: spans as they start and end in the application (the processor), with
    :mod:`.livetables` (what is held of the spans in flight, bounded) and :mod:`.livefeed`
    (the observations their starts and ends make);
  - :mod:`.replay`: spans read after the fact, replayed in time order (scan, serve), with
    :mod:`.assembly` (when a trace read by scan is complete), :mod:`.groups` (grouped
    runs across traces: held in scan, ended when idle in serve and the processor) and
    :mod:`.traces` (a trace a request at a time, late spans merged: serve), over
    :mod:`.opentraces` (the open traces, their budget) and :mod:`.provisional` (runs
    guessed before their ancestors arrive);
  - :mod:`.logruns`: log records, ordered per run in a bounded buffer (scan, serve).
* :mod:`.ungrouped`: whether a set-up's tool calls can form runs at all (root tool spans
  naming no conversation, from one service), for the adapters' run-time warning.

Adding a kind of observation (a compaction boundary, say): a method of :class:`RunModel`
that makes its engine call; a constant, its producer in :func:`.replay.observations` and its
handler in :data:`.replay.STEPS` (spans read after the fact); the branch of the span kind
that carries it in :mod:`.live` (``_start``/``end``) and its call in :mod:`.livefeed`; and, if log records carry it, its
``LogObservation`` kind in :meth:`.logruns.LogRunTracker._feed`.

The adapters (``processor``, ``service``, ``scan``, ``logs``) only convert their input into
what these take (:class:`~otel_progress.conventions.spans.SpanRecord`,
:class:`~otel_progress.conventions.logs.record.LogRecordView`, the SDK's spans) and what comes out into
their output (annotations, metrics, reports).
"""

from __future__ import annotations

from .model import RunModel, SummaryHook
from .signals import LOGS, SPANS, SignalArbiter

__all__ = ["LOGS", "SPANS", "RunModel", "SignalArbiter", "SummaryHook"]
