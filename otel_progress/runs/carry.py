"""One open trace of ``otel-progress serve`` carried to another process: what a replica
knows of it, taken out of a :class:`~.traces.TraceTable` and put into another one.

A :class:`TraceBundle` holds, for one trace id, everything its continuation needs:

* the engine's state of the trace and its runs (:class:`otel_progress.engine.tables.TraceState`:
  evidence, windows, escalation level, the loop last announced);
* the service's state of the trace (:class:`~.opentraces.TraceState`): the lineage, the
  span ids seen with the detections placed on them (retries), what was reported
  (``reported``: by span, by turn, by turn, reason and level, and by ``(run, reason,
  level)``), the detections waiting for their run's agent span, the provisional runs'
  guesses;
* the run model's tags and held-back detections of the trace's runs.

The spans held for the merge window (the spans' bytes, the bulk of a trace's state) are
carried while they weigh at most :data:`CARRIED_HELD_BYTES`, with the whole lineage and
every span id seen: a span that arrives late after a hand-off (a batch the sender retried
after the restart, overtaken by the batches it sent to the restarted replica meanwhile)
then makes the continuing replica analyse the trace again whole, in time order, as the
replica that held it all along would. A trace whose held spans weigh more (or were already
dropped: past the merge window, or for the memory budget) is carried without them: of the
span ids it remembers (its lineage, the spans seen for retries, with the detections placed
on them), the :data:`CARRIED_SPANS` latest are carried, and the ancestors of those in the
lineage (agents, plan nodes); a late span is then replayed as it comes, a retried batch
older than that is detected as new (the engine's own record of a run's latest span ids
still drops its calls), and a span whose parent was forgotten joins a provisional run
until its ancestor arrives. Times are
carried as ages (seconds before the export), since each process has its own monotonic
clock. A continued trace is marked ``continued``: a detection whose ``(run, reason,
level)`` was announced before is never announced again (:meth:`~.opentraces.TraceState.first_report`).

The runs that are no trace are carried the same way in a :class:`RunBundle`, keyed by
their engine key: a **grouped run** (root tool calls of one conversation across traces,
:class:`~.groups.IdleGroups`: its engine state and when it was last fed) and a **log run**
(a coding agent's prompt read from its log records, :class:`~.logruns.LogRunTracker`:
the :class:`~.logruns.LogRun`, its engine state, and what the service keeps to place its
detections). Every bundle also carries, for the agent sessions its runs name, which
signal (logs or spans) reported for the session (:meth:`~.signals.SignalArbiter.state_of`),
so that one loop seen through both signals is still reported once after a hand-off. A
conversation followed across traces (its turns so far, :mod:`otel_progress.engine.scopes`)
is a :class:`ConversationBundle`.
"""

from __future__ import annotations

import copy
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from .logruns import LogRunTracker
from .model import RunModel
from .traces import TraceTable

__all__ = ["CARRIED_HELD_BYTES", "CARRIED_SPANS", "CONVERSATION_KEY", "ConversationBundle", "RunBundle",
           "TraceBundle", "export_group", "export_log_run", "export_trace", "import_group", "import_log_run",
           "import_trace"]

#: Span ids carried per trace (the latest; and in the lineage, their ancestors).
CARRIED_SPANS = 64
#: The most a trace's held spans may weigh (estimated bytes) to be carried with it.
CARRIED_HELD_BYTES = 256 * 1024


@dataclass
class TraceBundle:
    """What one process knew of one open trace (see the module docstring)."""

    trace_id: str
    service: Any  # runs.opentraces.TraceState (its held spans carried within CARRIED_HELD_BYTES)
    engine: Any = None  # engine.tables.TraceState, or None (no tool call yet)
    idle: float = 0.0  # seconds since the trace's latest span
    complete_age: float | None = None  # seconds since its root span arrived (None: not yet)
    engine_idle: float = 0.0
    tags: list[tuple[tuple[str, str], tuple[str, int]]] = field(default_factory=list)
    held: list[tuple[tuple[str, str], list[Any]]] = field(default_factory=list)
    sessions: list[tuple[str, tuple[int, int, int]]] = field(default_factory=list)


@dataclass
class RunBundle:
    """What one process knew of one open run that is no trace: a grouped run
    (``kind="group"``) or a log run (``kind="log"``), keyed by its engine key (see the
    module docstring)."""

    key: str
    kind: str
    engine: Any = None  # engine.tables.TraceState of the key, or None (no tool call yet)
    engine_idle: float = 0.0
    idle: float = 0.0  # seconds since the run was last fed
    tags: list[tuple[tuple[str, str], tuple[str, int]]] = field(default_factory=list)
    held: list[tuple[tuple[str, str], list[Any]]] = field(default_factory=list)
    sessions: list[tuple[str, tuple[int, int, int]]] = field(default_factory=list)
    run: Any = None  # a log run's runs.logruns.LogRun
    extra: Any = None  # what the driver keeps of the run (the service's log runs: where detections go)


#: The prefix of a carried conversation's key (``conversation/`` + its id).
CONVERSATION_KEY = "conversation/"


@dataclass
class ConversationBundle:
    """What one process remembered of one conversation followed across traces (its turns
    as the conversation scope and the model side judged them:
    ``ProgressEngine.conversation_state(conversations=[conversation])``)."""

    conversation: str
    state: dict[str, Any]


def _model_part(model: RunModel, key: str) -> tuple[list[Any], list[Any], list[Any]]:
    """The run model's tags, held-back detections and session arbitration of one engine key."""
    tags = list(model.tags_of(key))
    held = list(model.held_of(key))
    sessions = []
    for session in dict.fromkeys(tag[0] for _key, tag in tags):
        state = model.arbiter.state_of(session)
        if state is not None:
            sessions.append((session, state))
    return tags, held, sessions


def _adopt_model_part(model: RunModel, bundle: TraceBundle | RunBundle) -> None:
    for key, tag in bundle.tags:
        model.tag(key[0], key[1], tag[0], tag[1])
    for key, dets in bundle.held:
        model.hold(key, dets)
    for session, state in getattr(bundle, "sessions", ()):
        model.arbiter.adopt(session, state)


def _adopt_engine(model: RunModel, key: str, state: Any, idle: float, now: float) -> None:
    engine = model.engine
    if state is not None:
        engine.adopt_trace(state, idle, now)
    elif engine.trace_state(key) is not None:
        engine.discard_trace(key)


def export_trace(table: TraceTable, trace_id: str, now: float | None = None,
                 held_limit: int = CARRIED_HELD_BYTES) -> TraceBundle | None:
    """The bundle of an open trace of ``table`` (None: not open), its held spans with it
    while they weigh at most ``held_limit`` bytes. The objects are the live ones (the
    engine's, the run model's): write them out before the table changes."""
    now = time.monotonic() if now is None else now
    st = table.open.traces.get(trace_id)
    if st is None:
        return None
    service = copy.copy(st)
    service.size = 0
    if st.held is not None and st.held_bytes <= held_limit:
        service.held = list(st.held)  # (and the lineage and seen span ids whole, the live ones)
    else:
        service.held, service.held_bytes = None, 0
        service.lineage = st.lineage.trimmed(CARRIED_SPANS)
        seen = st.seen
        service.seen = OrderedDict((sid, seen[sid]) for sid in reversed(list(islice(reversed(seen), CARRIED_SPANS))))
    engine = table.engine.trace_state(trace_id)
    tags, held, sessions = _model_part(table.model, trace_id)
    return TraceBundle(
        trace_id=trace_id, service=service, engine=engine, idle=max(0.0, now - st.last_seen),
        complete_age=None if st.complete_at is None else max(0.0, now - st.complete_at),
        engine_idle=0.0 if engine is None else max(0.0, now - engine.last_seen), tags=tags, held=held,
        sessions=sessions)


def import_trace(table: TraceTable, bundle: TraceBundle, now: float | None = None) -> None:
    """Continue ``bundle``'s trace in ``table``, replacing what the table held of it (its
    detections are not reported again: the replaced state is dropped, not ended)."""
    now = time.monotonic() if now is None else now
    st = bundle.service
    if st.held is None:
        st.held_bytes = 0
    st.last_seen = now - bundle.idle
    st.complete_at = None if bundle.complete_age is None else now - bundle.complete_age
    st.continued = True
    table.open.adopt(st)
    _adopt_engine(table.model, bundle.trace_id, bundle.engine, bundle.engine_idle, now)
    _adopt_model_part(table.model, bundle)


def _run_bundle(model: RunModel, key: str, kind: str, idle: float, now: float) -> RunBundle:
    engine = model.engine.trace_state(key)
    tags, held, sessions = _model_part(model, key)
    return RunBundle(key=key, kind=kind, engine=engine, idle=idle, tags=tags, held=held, sessions=sessions,
                     engine_idle=0.0 if engine is None else max(0.0, now - engine.last_seen))


def export_group(table: TraceTable, key: str, now: float | None = None) -> RunBundle | None:
    """The bundle of the open grouped run ``key`` of ``table`` (None: not open here)."""
    now = time.monotonic() if now is None else now
    seen = table.groups.last_seen(key)
    if seen is None:
        return None
    return _run_bundle(table.model, key, "group", max(0.0, now - seen), now)


def import_group(table: TraceTable, bundle: RunBundle, now: float | None = None) -> None:
    """Continue a grouped run in ``table``, replacing what the table held of it."""
    now = time.monotonic() if now is None else now
    _adopt_engine(table.model, bundle.key, bundle.engine, bundle.engine_idle, now)
    _adopt_model_part(table.model, bundle)
    table.groups.adopt(bundle.key, now - bundle.idle)


def export_log_run(tracker: LogRunTracker, key: str, now: float | None = None) -> RunBundle | None:
    """The bundle of the open log run ``key`` of ``tracker`` (None: not open here). Its
    observations not yet fed to the engine go with it; the callers' record references do
    not (they name records of this process's requests)."""
    run = tracker.runs.get(key)
    if run is None:
        return None
    now = tracker.clock() if now is None else now
    carried = copy.copy(run)
    carried.buffer = list(run.buffer)
    carried.records = OrderedDict()
    carried.resource = carried.scope = None
    bundle = _run_bundle(tracker.model, key, "log", max(0.0, now - run.last_seen), now)
    bundle.run = carried
    return bundle


def import_log_run(tracker: LogRunTracker, bundle: RunBundle, now: float | None = None) -> None:
    """Continue a log run in ``tracker``, replacing what it held of it (not ended: its
    detections are not reported again)."""
    now = tracker.clock() if now is None else now
    tracker.forget(bundle.key)
    _adopt_engine(tracker.model, bundle.key, bundle.engine, bundle.engine_idle, now)
    _adopt_model_part(tracker.model, bundle)
    tracker.adopt(bundle.run, now - bundle.idle)
