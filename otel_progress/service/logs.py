"""``LogsService/Export`` in ``otel-progress serve``: coding agents' OTLP log events.

:class:`LogsDetector` reads an ``ExportLogsServiceRequest`` slim (resources, scopes and
records stay bytes), decodes only the records whose bytes hold an event name a reader
knows (:func:`~otel_progress.otlp.logs_proto.records_from_slim`), reads each with the
agents' readers (:mod:`otel_progress.conventions.logs`) and feeds one shared
:class:`~otel_progress.runs.logruns.LogRunTracker`; the runs a request touched are
released to the engine at the end of the request (records inside one request are put in
each run's own order; across requests, arrival order), and a run ends when idle for the
trace TTL. Detections are written into the request as the design of issue 12 asks:

- the offending tool record (when it is in the request) gets ``progress.detected``,
  ``progress.reason`` and ``progress.level``;
- a detection record (``event_name`` and ``event.name`` = ``progress.no_progress`` or
  ``progress.livelock``, attributes :meth:`Detection.event_attributes` plus the three
  above, the tool call's id and the run's ids) is added in the offending record's resource
  and scope, or, when that record came in an earlier request, in a resource copied from the
  run's latest record;
- a ``gen_ai.evaluation.result`` record (:mod:`otel_progress.model.evaluation`, written by
  :func:`~.log_events.evaluation_record` as for traces), in the offending record's span
  context when it has one (coding agents' records often have none), with the tool call's
  id, the run key and the run's ids, in the same resource under the scope
  ``otel-progress.service``.

``detection_events`` (``--detection-events``) chooses: ``both`` (the default) writes all
three, ``span`` the first two (as before the evaluation records), ``log`` only the
evaluation record (the agent's records are forwarded as received). Detections found when
a run ends idle have no request: :meth:`LogsDetector.end_idle` writes their records into
a request of their own (for the logs queue).

Only the records that get an annotation are decoded and encoded again; every other record
stays the bytes it came in. A record the protobuf runtime cannot decode (bad encoding, or
values nested past its recursion limit of 100 levels: a ``kvlistValue`` about 32 deep) is
not read: it is counted in ``progress.service.log_records.unreadable`` and forwarded as it
came, with the rest of the request, which is read as usual.

Annotations never carry arguments or outputs: the detection record's body is a one-line
summary and the nudge and handoff texts are left out. A request delivered again (the
sender retried it) is annotated again the same way: the tracker gives each tool call a
stable id, the engine does not count it twice, and the detections placed on that id are
re-placed (their records too, as the first delivery failed; they are no findings: tap mode
sends none again).

:class:`LogsForwarder` sends the (annotated) request downstream to ``LogsService/Export``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.logs.v1 import logs_pb2

from ..conventions.logs import event_names, read_log
from ..engine import ProgressEngine
from ..model import Detection
from ..model.evaluation import detection_events as detection_events_mode
from ..model.limits import clip_chars
from ..otlp.logs_proto import name_markers, records_from_slim
from ..runs.budget import StateBudget
from ..runs.carry import RunBundle, export_log_run, import_log_run
from ..runs.identity import log_session
from ..runs.logruns import FED_KINDS, SESSION_END_EVENTS, LogRunTracker, RunEnd
from ..runs.model import RunModel
from .forwarder import UnaryExporter
from .log_events import SCOPE_BYTES, evaluation_record
from .metrics import ServiceMetrics
from .otlp import SlimLogsRequest, key_values

#: The prefix of a log run's key in the state store and checkpoints (:func:`.carried.store_key`).
LOG_RUN_KEY = "log/"

if TYPE_CHECKING:
    from .state import StateKeeper

__all__ = [
    "LOGS_EXPORT_METHOD", "LogsDetector", "LogsForwarder", "LogsResult", "annotate_record",
    "detection_record", "log_evaluation_record",
]

_log = logging.getLogger(__name__)

LOGS_EXPORT_METHOD = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
ExportLogsServiceRequest = logs_service_pb2.ExportLogsServiceRequest
ExportLogsServiceResponse = logs_service_pb2.ExportLogsServiceResponse

#: Attributes copied from the offending record to the detection record (ids only), so a
#: backend query on the session finds both.
RUN_ID_ATTRIBUTES = ("session.id", "prompt.id", "prompt_id", "conversation.id", "conversation_id")
_MAX_VALUE = 256
_SEVERITY_WARN = logs_pb2.SEVERITY_NUMBER_WARN
_EVENT_NAMES = event_names() | SESSION_END_EVENTS
_MARKERS = name_markers(_EVENT_NAMES)
#: Tool call ids remembered with their detections (to re-place them on a redelivery).
_MAX_PLACED = 16_384
_PLACED_BYTES = 900  # one remembered placement (estimated, as LOG_RUN_BYTES)
Loc = tuple[int, int, int]
#: A record of a request as read: where it is, its view and what it holds (None: a session's
#: end event).
_Read = tuple[Loc, Any, Any]


class MalformedLogsRequest(ValueError):
    """The request is not an ``ExportLogsServiceRequest``."""


@dataclass
class LogsResult:
    """What one request produced: the records read and the detections placed.

    ``request`` is the request read slim (:data:`~.otlp.SlimLogsRequest`), with the
    annotations when ``annotated``: ``request.SerializeToString()`` is the request to
    forward. ``added``: the records of the new detections added (detection records and
    ``gen_ai.evaluation.result`` records; not those placed again on a redelivery), as
    ``(resource index, scope index, record bytes)``, in the order they were added (for
    :meth:`LogsDetector.findings_request`)."""

    records: int = 0
    observed: int = 0
    detections: list[Detection] = field(default_factory=list)
    new_detections: list[Detection] = field(default_factory=list)
    request: Any = None
    annotated: bool = False
    unreadable: int = 0
    added: list[tuple[int, int, bytes]] = field(default_factory=list)


def _bounded(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: clip_chars(v, _MAX_VALUE) if isinstance(v, str) else v for k, v in attrs.items()}


def annotate_record(record: Any, det: Detection) -> bool:
    """Add ``progress.detected``/``progress.reason``/``progress.level`` to a protobuf log
    record (replacing earlier values). Returns whether it changed."""
    wanted = _bounded(det.span_attributes())
    current = {kv.key: kv.value for kv in record.attributes}
    if (current.get("progress.reason") is not None and current["progress.reason"].string_value == det.reason.value
            and current.get("progress.level") is not None
            and current["progress.level"].int_value >= int(det.level)):
        return False
    kept = [kv for kv in record.attributes if kv.key not in wanted]
    del record.attributes[:]
    record.attributes.extend(kept)
    record.attributes.extend(key_values(wanted))
    return True


def _run_ids(source: Any) -> dict[str, str]:
    """The run's ids of a record (:data:`RUN_ID_ATTRIBUTES`, string values only)."""
    return {kv.key: kv.value.string_value for kv in source.attributes
            if kv.key in RUN_ID_ATTRIBUTES and kv.value.WhichOneof("value") == "string_value"}


def detection_record(det: Detection, source: Any = None, now_ns: int | None = None) -> Any:
    """The detection event record of ``det``; ``source`` is the offending record (its time,
    trace context and run ids are copied), if known."""
    now = time.time_ns() if now_ns is None else now_ns
    name = "progress." + det.event
    record = logs_pb2.LogRecord(
        time_unix_nano=(source.time_unix_nano or source.observed_time_unix_nano) if source is not None else now,
        observed_time_unix_nano=now,
        severity_number=_SEVERITY_WARN,
        severity_text="WARN",
        event_name=name,
    )
    record.body.string_value = (f"otel-progress: {det.reason.value} at turn {det.turn} of {det.agent or 'the agent'}"
                                f" (level {int(det.level)}, {det.level.action})")
    attrs: dict[str, Any] = {"event.name": name}
    attrs.update(det.event_attributes())
    attrs.update(det.span_attributes())
    attrs["progress.annotates.tool_call.id"] = det.span_id
    attrs["progress.run_key"] = det.run_id
    if det.agent:
        attrs["gen_ai.agent.name"] = det.agent
    if source is not None:
        record.trace_id = source.trace_id
        record.span_id = source.span_id
        attrs.update(_run_ids(source))
    record.attributes.extend(key_values(_bounded(attrs)))
    return record


def log_evaluation_record(det: Detection, source: Any = None, now_ns: int | None = None) -> Any:
    """The ``gen_ai.evaluation.result`` record of ``det`` (the trace path's,
    :func:`~.log_events.evaluation_record`), in the context of ``source``, the offending
    record, if known: its trace and span ids (often none: then the record has no span
    context), time and trace flags; else no span context and the time now. With the ids
    that find the offending record without a span context: ``progress.annotates.tool_call.id``,
    ``progress.run_key`` and the run's ids of ``source``."""
    now = time.time_ns() if now_ns is None else now_ns
    if source is None:
        record = evaluation_record(det, now, 0, now, span_context=(b"", b""))
    else:
        record = evaluation_record(det, source.time_unix_nano or source.observed_time_unix_nano or now, source.flags,
                                   now, span_context=(source.trace_id, source.span_id))
    extra: dict[str, Any] = {"progress.annotates.tool_call.id": det.span_id, "progress.run_key": det.run_id}
    if source is not None:
        extra.update(_run_ids(source))
    record.attributes.extend(key_values(_bounded(extra)))
    return record


class _Placements:
    """The detections placed on each tool call (to place them again when a request is
    retried), the least recently placed forgotten first past ``limit``, found by run too."""

    def __init__(self, limit: int = _MAX_PLACED) -> None:
        self.limit = limit
        # (run key, tool call id) -> the detections (call ids are only unique within a run)
        self._placed: OrderedDict[tuple[str, str], tuple[Detection, ...]] = OrderedDict()
        self._calls: dict[str, dict[str, None]] = {}  # run key -> its call ids placed

    def __len__(self) -> int:
        return len(self._placed)

    def get(self, run_key: str, call_id: str) -> tuple[Detection, ...]:
        return self._placed.get((run_key, call_id), ())

    def add(self, run_key: str, call_id: str, dets: Sequence[Detection]) -> None:
        """Remember ``dets`` placed on a call too (the latest remembered last)."""
        key = (run_key, call_id)
        self._placed[key] = (*self._placed.get(key, ()), *dets)
        self._placed.move_to_end(key)
        self._calls.setdefault(run_key, {})[call_id] = None
        while len(self._placed) > self.limit:
            self.forget_oldest()

    def forget_oldest(self) -> None:
        (run_key, call_id), _dets = self._placed.popitem(last=False)
        calls = self._calls.get(run_key)
        if calls is not None:
            calls.pop(call_id, None)
            if not calls:
                del self._calls[run_key]

    def set_run(self, run_key: str, placed: Sequence[tuple[str, Sequence[Detection]]]) -> None:
        """Replace what is remembered of one run's calls (by another process's :meth:`of_run`)."""
        for call in list(self._calls.pop(run_key, ())):
            self._placed.pop((run_key, call), None)
        for call, dets in placed:
            self.add(run_key, call, tuple(dets))

    def of_run(self, run_key: str) -> list[tuple[str, tuple[Detection, ...]]]:
        """``(call id, detections)`` of one run's calls."""
        return [(call, self._placed[(run_key, call)]) for call in self._calls.get(run_key, ())]


@dataclass
class _RunPlace:
    resource: bytes | None = None  # the serialized Resource of the run's latest record
    scope: bytes = b""  # its serialized InstrumentationScope


class LogsDetector:
    """Detection over ``ExportLogsServiceRequest`` bytes (thread-safe; one per service).

    ``engine``: the run model shared with the trace path (so that one agent's logs and
    traces are reported once), or an engine. ``budget``: the memory budget shared with the
    traces (``--max-state-mib``): the log runs' estimate is its ``logs`` part, and past it
    the least recently seen log runs end early (through the engine: what they found is
    kept), counted in ``progress.service.log_runs.ended_early``. ``detection_events``: what
    a detection writes (``--detection-events``; module docstring): ``span`` the annotation
    and the detection record, ``log`` the ``gen_ai.evaluation.result`` record, ``both``
    (the default) all three."""

    def __init__(self, engine: RunModel | ProgressEngine, metrics: ServiceMetrics, *, idle_seconds: float = 3600.0,
                 max_runs: int | None = None, budget: StateBudget | None = None,
                 detection_events: str = "both") -> None:
        mode = detection_events_mode(detection_events, "detection_events")
        self._annotate, self._evaluate = mode != "log", mode != "span"
        self.model = engine if isinstance(engine, RunModel) else RunModel(engine)
        self.engine = self.model.engine
        self.metrics = metrics
        self.budget = budget if budget is not None else StateBudget(1 << 62)
        self.tracker = LogRunTracker(self.model, reorder_window=1 << 30, idle_seconds=idle_seconds,
                                     max_runs=max_runs)
        self._lock = threading.Lock()
        self._placed = _Placements()
        self._places: dict[str, _RunPlace] = {}
        #: run state kept beyond this process (:class:`~.state.StateKeeper`; set by the service)
        self.keeper: StateKeeper | None = None
        self.metrics.gauge_callback("progress.service.state.log_runs", lambda: len(self.tracker.runs))

    def process(self, raw: bytes) -> LogsResult:
        """Read, detect and annotate one request (``result.request`` is the request read
        slim, changed in place when ``result.annotated``). Raises :class:`MalformedLogsRequest`
        (never for a record: records are decoded one by one)."""
        try:
            request = SlimLogsRequest.FromString(raw)
        except Exception as exc:
            raise MalformedLogsRequest(f"not an OTLP ExportLogsServiceRequest: {exc}") from exc
        result = LogsResult(request=request)
        read = self._read(request, result)
        keeper = self.keeper
        keys = None
        if keeper is not None and keeper.store is not None:
            keys = [LOG_RUN_KEY + obs.run_key for _loc, _view, obs in read if obs is not None and not obs.session_wide]
        incoming = keeper.fetch(keys) if keys else ()  # type: ignore[union-attr]
        outgoing: list[tuple[str, int, bytes]] = []
        with self._lock:
            if incoming:
                keeper.adopt(self, incoming)  # type: ignore[union-attr]
            found, locations, replays, places = self._run(read, request, result)
            if keys:
                outgoing = keeper.collect(self, [LOG_RUN_KEY + key for key in places])  # type: ignore[union-attr]
        if outgoing:
            keeper.publish(outgoing)  # type: ignore[union-attr]
        self.metrics.add("progress.service.log_records.received", result.records)
        self.metrics.add("progress.service.log_records.read", result.observed)
        self.metrics.add("progress.service.log_records.unreadable", result.unreadable)
        placements = [(locations.get((det.run_id, det.span_id)), det, True) for det in found]
        placements += [(loc, det, False) for loc, det in replays]
        sources: dict[tuple[int, int, int], Any] = {}  # the offending records, decoded once each
        for loc, det, fresh in placements:
            self._place(result, loc, det, places.get(det.run_id), sources, fresh)
            result.annotated = True
        if self._annotate:  # (else they are left as they came)
            for (ri, si, li), source in sources.items():
                request.resource_logs[ri].scope_logs[si].log_records[li] = source.SerializeToString()
        self._count(found)
        result.detections = [d for _, d, _ in placements]
        result.new_detections = found
        return result

    def _count(self, found: Sequence[Detection]) -> None:
        for det in found:
            self.metrics.add("progress.service.detections", 1, {
                "progress.reason": det.reason.value, "progress.level": int(det.level),
                "progress.scope": det.scope.value, "progress.event": det.event,
            })

    @staticmethod
    def _read(request: Any, result: LogsResult) -> list[_Read]:
        """The read stage (no lock): the request's records that end a session or hold an
        observation the runs are fed."""
        out: list[_Read] = []
        result.records = sum(len(sl.log_records) for rl in request.resource_logs for sl in rl.scope_logs)
        for ri, si, li, view in records_from_slim(request, names=_EVENT_NAMES, markers=_MARKERS):
            if view is None:
                result.unreadable += 1
            elif view.event_name in SESSION_END_EVENTS:
                out.append(((ri, si, li), view, None))
            else:
                observation = read_log(view)
                if observation is not None and observation.kind in FED_KINDS:
                    out.append(((ri, si, li), view, observation))
        return out

    def _run(self, read: Sequence[_Read], request: Any,
             result: LogsResult) -> tuple[list[Detection], dict[tuple[str, str], Loc], list[tuple[Loc, Detection]],
                                          dict[str, _RunPlace]]:
        """The run stage (lock held): the records read through the log runs; the
        detections, where the request's tool records are, the detections to place again
        (a retried request) and where each run's detection records go (the runs touched, and
        those that ended: their latest resource and scope)."""
        locations: dict[tuple[str, str], Loc] = {}
        gone: dict[str, _RunPlace] = {}  # the places of the runs that ended
        replays: list[tuple[Loc, Detection]] = []
        touched: dict[str, tuple[int, int]] = {}
        found: list[Detection] = []
        tracker = self.tracker
        for (ri, si, li), view, observation in read:
            if observation is None:
                found.extend(self._ended(tracker.end_session(log_session(view.attributes)), gone))
                continue
            observation = tracker.resolve(observation)  # (a session-wide record: its run)
            if observation is None:
                continue
            result.observed += 1
            touched[observation.run_key] = (ri, si)  # the run's latest record in this request
            if observation.kind in ("tool", "compaction"):
                call_id = tracker.call_id(observation, view)
                locations[(observation.run_key, call_id)] = (ri, si, li)
                replays.extend(((ri, si, li), det) for det in self._placed.get(observation.run_key, call_id))
            dets, ended = tracker.add_observation(observation, view)
            found.extend(dets)
            found.extend(self._ended(ended, gone))
        for key, (ri, si) in touched.items():
            found.extend(tracker.release(key))
            rl = request.resource_logs[ri]
            place = self._places.setdefault(key, _RunPlace())
            place.resource = rl.resource
            place.scope = rl.scope_logs[si].scope
        found = self.model.reported(found)
        for det in found:
            self._placed.add(det.run_id, det.span_id, (det,))
        found.extend(self._make_room(touched, gone))
        places = {key: self._places[key] for key in touched if key in self._places}
        for key, place in gone.items():
            places.setdefault(key, place)
        return found, locations, replays, places

    def _ended(self, ended: Sequence[RunEnd], gone: dict[str, _RunPlace]) -> list[Detection]:
        """Runs that ended: their last detections (their places move to ``gone``); those
        ended early are counted."""
        out: list[Detection] = []
        for end in ended:
            out.extend(end.detections)
            place = self._places.pop(end.run.run_key, None)
            if place is not None:
                gone[end.run.run_key] = place
            if end.why in ("max_runs", "memory_budget"):
                self.metrics.add("progress.service.log_runs.ended_early", 1, {"reason": end.why})
        return out

    @property
    def held_bytes(self) -> int:
        """Estimated bytes the log runs hold (the tracker's runs and their places)."""
        return self.tracker.held_bytes + _PLACED_BYTES * len(self._placed)

    def _make_room(self, keep: Mapping[str, Any], gone: dict[str, _RunPlace]) -> list[Detection]:
        """Account the log runs in the budget; while over it, end the least recently seen
        runs early (not those of this request; the oldest remembered placements go with
        them), then forget placements; the ended runs' last detections (detached)."""
        out: list[Detection] = []
        self.budget.set("logs", self.held_bytes)
        runs, placed = self.tracker.runs, self._placed
        while self.budget.over() and (len(runs) > len(keep) or placed):
            if len(runs) > len(keep):
                key = next(iter(runs))
                if key in keep:
                    runs.move_to_end(key)
                    continue
                out.extend(self.model.reported(self._ended(self.tracker.evict(1), gone)))
            for _ in range(min(len(placed), 4)):
                placed.forget_oldest()
            self.budget.set("logs", self.held_bytes)
        return out

    # -- run state carried to another process (:mod:`.state`) --------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the detector's lock (no request is evaluated meanwhile)."""
        with self._lock:
            yield

    def run_keys(self) -> list[str]:
        """The open log runs' keys, the most recently seen first (under :meth:`locked`)."""
        return list(reversed(self.tracker.runs))

    def export_run(self, key: str, now: float | None = None) -> RunBundle | None:
        """What this detector knows of the open log run ``key`` (under :meth:`locked`):
        :func:`~otel_progress.runs.carry.export_log_run`, with where its detection records
        go and the detections placed on its calls (to place them again when a request is
        retried on the replica that continues it). None: not open here."""
        bundle = export_log_run(self.tracker, key, now)
        if bundle is None:
            return None
        place = self._places.get(key)
        bundle.extra = {
            "place": None if place is None else (place.resource, place.scope),
            "placed": self._placed.of_run(key),
        }
        return bundle

    def import_run(self, bundle: RunBundle, now: float | None = None) -> None:
        """Continue a log run another process exported (:meth:`export_run`), replacing what
        this detector held of it (under :meth:`locked`)."""
        import_log_run(self.tracker, bundle, now)
        extra = bundle.extra if isinstance(bundle.extra, dict) else {}
        place = extra.get("place")
        if place is not None:
            self._places[bundle.key] = _RunPlace(resource=place[0], scope=place[1])
        self._placed.set_run(bundle.key, extra.get("placed", ()))
        self.budget.set("logs", self.held_bytes)

    def _place(self, result: LogsResult, loc: Loc | None, det: Detection, place: _RunPlace | None,
               sources: dict[Loc, Any], fresh: bool) -> None:
        """Write ``det`` into ``result.request``, beside the offending record at ``loc`` (in
        its resource and scope), or, when that record is not in the request, in a resource
        of its own (a copy of the run's latest, ``place``, when known): the annotation and
        the detection record, the ``gen_ai.evaluation.result`` record (in the scope
        ``otel-progress.service``), or all three, as the mode says. ``fresh``: a new
        detection (not placed again on a redelivery), whose records are findings."""
        request, source, si = result.request, None, -1
        if loc is not None:
            ri, si, li = loc
            source = sources.get(loc)
            if source is None:  # (it was decoded to be read: it decodes)
                source = sources[loc] = logs_pb2.LogRecord.FromString(
                    request.resource_logs[ri].scope_logs[si].log_records[li])
        else:
            self.metrics.add("progress.service.detections.detached")
            rl = request.resource_logs.add()
            if place is not None and place.resource is not None:
                rl.resource = place.resource
            ri = len(request.resource_logs) - 1
            if self._annotate:
                si = len(rl.scope_logs)
                rl.scope_logs.add(scope=place.scope if place is not None else b"")
        if self._annotate:
            if source is not None:
                annotate_record(source, det)
            self._append(result, ri, si, detection_record(det, source), fresh)
        if self._evaluate:
            self._append(result, ri, _own_scope(request.resource_logs[ri]), log_evaluation_record(det, source), fresh)
            if fresh:
                self.metrics.add("progress.service.detections.logged")

    @staticmethod
    def _append(result: LogsResult, ri: int, si: int, record: Any, fresh: bool) -> None:
        raw = record.SerializeToString()
        result.request.resource_logs[ri].scope_logs[si].log_records.append(raw)
        if fresh:
            result.added.append((ri, si, raw))

    @staticmethod
    def findings_request(result: LogsResult) -> Any:
        """Tap mode, and the runs that ended idle: a request holding only the records of the
        new detections that :meth:`process` (or :meth:`end_idle`) added, each in the
        resource and scope it was added to."""
        request = result.request
        out = SlimLogsRequest()
        targets: dict[int, Any] = {}
        scopes: dict[tuple[int, int], Any] = {}
        for ri, si, record in sorted(result.added, key=lambda a: (a[0], a[1])):  # (stable: added order kept)
            target = targets.get(ri)
            if target is None:
                source = request.resource_logs[ri]
                target = targets[ri] = out.resource_logs.add(resource=source.resource,
                                                              schema_url=source.schema_url)
            scope = scopes.get((ri, si))
            if scope is None:
                source_scope = request.resource_logs[ri].scope_logs[si]
                scope = scopes[(ri, si)] = target.scope_logs.add(scope=source_scope.scope,
                                                                schema_url=source_scope.schema_url)
            scope.log_records.append(record)
        return out

    def end_idle(self, now: float | None = None) -> LogsResult:
        """End the runs idle for longer than the TTL. Their last detections have no request
        to go in: ``result.request`` holds only their records, written as detached
        detections are (:meth:`_place`; counted as detached), for the logs queue."""
        gone: dict[str, _RunPlace] = {}
        with self._lock:
            found = self.model.reported(self._ended(self.tracker.end_idle(now), gone))
            self.budget.set("logs", self.held_bytes)
        result = LogsResult(request=SlimLogsRequest(), detections=list(found), new_detections=found)
        for det in found:
            self._place(result, None, det, gone.get(det.run_id), {}, True)
        self._count(found)
        return result

    def maintain(self, now: float | None = None) -> list[Detection]:
        """End the runs idle for longer than the TTL; returns their last detections
        (:meth:`end_idle`, whose request the caller drops)."""
        return self.end_idle(now).new_detections

    @property
    def open_runs(self) -> int:
        """Runs of log input held."""
        return len(self.tracker.runs)


def _own_scope(rl: Any) -> int:
    """The index of the scope ``otel-progress.service`` in a slim ``ResourceLogs`` (added
    when it has none)."""
    for i, sl in enumerate(rl.scope_logs):
        if sl.scope == SCOPE_BYTES:
            return i
    rl.scope_logs.add(scope=SCOPE_BYTES)
    return len(rl.scope_logs) - 1


class LogsForwarder(UnaryExporter):
    """Sends ``ExportLogsServiceRequest`` bytes to one OTLP/gRPC endpoint (``LogsService``)."""

    def __init__(self, endpoint: str, *, timeout: float = 4.0, compression: str = "gzip", insecure: bool = True,
                 ca_file: str = "", headers: Sequence[tuple[str, str]] = (), max_message_mib: int = 64) -> None:
        super().__init__(endpoint, LOGS_EXPORT_METHOD, ExportLogsServiceResponse, timeout=timeout,
                         compression=compression, insecure=insecure, ca_file=ca_file, headers=headers,
                         max_message_mib=max_message_mib)
