"""The run model's engine side: every observation of every adapter reaches the engine here.

:class:`RunModel` turns observations of runs into engine calls: a tool call ends
(:meth:`~RunModel.tool`), a model call starts (:meth:`~RunModel.flush`: the previous tool
batch of the run is complete) or ends (:meth:`~RunModel.tokens`), the run's context is
compacted (:meth:`~RunModel.compaction`: a boundary between its steps), a model call answered
(:meth:`~RunModel.model_output`: its text, reasoning and requested tool calls), another detector
said it loops (:meth:`~RunModel.verdict`: kept in :attr:`~RunModel.verdicts`, carried by
the detections of ours it corroborates, see :mod:`.verdicts`), an agent invocation
ends (:meth:`~RunModel.end_run`), a trace or a grouped run is over (:meth:`~RunModel.end_trace`).
Every run that ends is summarised through one hook (``on_summary``: the wasted-turns
metric, the scan's table), whatever ended it: its agent span, its trace, an explicit end
in the input, the end of the input, idleness or a budget. The runs of one agent session
seen through two signals are arbitrated here (:mod:`.signals`): :meth:`~RunModel.keep`
says whether a detection is reported.

What the drivers decide (which run an observation belongs to, when, in which order) is in
:mod:`.replay` (traces read after the fact: scan, serve), :mod:`.live` (spans as they start
and end: the in-process processor) and :mod:`.logruns` (log records).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import replace

from ..engine import ProgressEngine, RunSummary
from ..model import Compaction, Detection, ModelOutput, ToolCall
from ..model.verdicts import Verdict
from .identity import evidence_rank
from .signals import SPANS, SignalArbiter
from .verdicts import VerdictBook

__all__ = ["RunModel", "SummaryHook"]

#: ``on_summary(summary)``: a run ended (every run, with or without detections).
SummaryHook = Callable[[RunSummary], None]
_MAX_TAGS = 65_536
_MAX_HELD = 16  # detections held back per run


class RunModel:
    """Feeds observations of runs to one engine (see the module docstring).

    Args:
        engine: the engine.
        on_summary: called with the summary of every run that ends.
    """

    __slots__ = ("_evicted", "_held", "_tags", "arbiter", "engine", "on_summary", "verdicts")

    def __init__(self, engine: ProgressEngine, on_summary: SummaryHook | None = None) -> None:
        self.engine = engine
        self.on_summary = on_summary
        self.arbiter = SignalArbiter()
        # (engine trace key, run id) -> (agent session, signal), for runs that name a session
        self._tags: OrderedDict[tuple[str, str], tuple[str, int]] = OrderedDict()
        # (trace, run) -> detections held back for a richer signal (see .signals)
        self._held: OrderedDict[tuple[str, str], list[Detection]] = OrderedDict()
        self._evicted = engine.stats.runs_evicted
        config = engine.config
        #: other detectors' verdicts per run (looked back over as far as any signal looks)
        self.verdicts = VerdictBook(max(config.window, config.frequency_window))

    # -- observations ---------------------------------------------------------------------

    def tool(self, call: ToolCall, *, flush: bool = False, session: str | None = None,
             signal: int = SPANS) -> list[Detection]:
        """A tool call ended (``flush``: no other call of its run is in flight). ``session``:
        the agent session it belongs to, if it names one; ``signal``: the signal it came by."""
        if session is not None:
            self.tag(call.trace_id, call.run_id, session, signal)
            self.arbiter.saw(session, signal, evidence_rank(call))
        return self.corroborate(self.engine.observe(call, flush=flush))

    def tag(self, trace: str, run: str, session: str, signal: int) -> None:
        """Note the agent session and signal of a run (for :meth:`keep`)."""
        key = (trace, run)
        tags = self._tags
        if key not in tags:
            tags[key] = (session, signal)
            if len(tags) > _MAX_TAGS:
                tags.popitem(last=False)

    def tags_of(self, trace: str) -> list[tuple[tuple[str, str], tuple[str, int]]]:
        """The session tags of the runs of one engine trace key (to carry them elsewhere)."""
        return [(k, v) for k, v in self._tags.items() if k[0] == trace] if self._tags else []

    def held_of(self, trace: str) -> list[tuple[tuple[str, str], list[Detection]]]:
        """The detections held back for the runs of one engine trace key."""
        return [(k, list(v)) for k, v in self._held.items() if k[0] == trace] if self._held else []

    def hold(self, key: tuple[str, str], dets: list[Detection]) -> None:
        """Hold back detections of a run (carried from another process)."""
        self._held[key] = list(dets)[:_MAX_HELD]
        if len(self._held) > _MAX_TAGS:
            self._held.popitem(last=False)

    def tag_all(self, dets: Iterable[Detection], session: str | None, signal: int = SPANS) -> None:
        """Note the session of detections placed on another trace than their run's engine key
        (a grouped run's detections go on their real trace)."""
        if session is not None:
            for det in dets:
                self.tag(det.trace_id, det.run_id, session, signal)

    def flush(self, trace: str, run: str | None = None) -> list[Detection]:
        """A model call of the run started (or a batch ended): its buffered calls are a
        complete step."""
        return self.corroborate(self.engine.flush(trace, run))

    def tokens(self, trace: str, run: str, tokens: int, input_tokens: int = 0) -> None:
        """A model call of the run ended, having consumed ``tokens`` (``input_tokens`` of
        them its input: the context it read)."""
        if tokens > 0 or input_tokens > 0:
            self.engine.record_tokens(trace, run, tokens, input_tokens=input_tokens)

    def model_output(self, output: ModelOutput) -> list[Detection]:
        """A model call of the run answered (:class:`~otel_progress.model.ModelOutput`: its
        text, reasoning, the tool calls it requested, the latest user message it was given):
        the detections of the model-side signals (``text_repeat``, ``unexecuted_repeat``)."""
        return self.corroborate(self.engine.observe_model(output))

    def verdict(self, verdict: Verdict, trace: str | None = None, run: str | None = None) -> Verdict:
        """Another detector said the run loops (``trace``/``run``: the run's engine keys,
        when the verdict does not carry them). Kept at the run's position when read: the
        steps it had completed plus the steps of the calls read but not yet evaluated
        (the engine's reorder buffer); never reported by itself. The verdict as kept."""
        if trace is not None or run is not None:
            verdict = replace(verdict, trace_id=verdict.trace_id if trace is None else trace,
                              run_id=verdict.run_id if run is None else run)
        state = self.engine.run_state(verdict.trace_id, verdict.run_id)
        turn = 0 if state is None else state.turn + _steps(state.pending)
        return self.verdicts.add(verdict, turn)

    def corroborate(self, dets: Iterable[Detection]) -> list[Detection]:
        """The detections, each carrying the verdict that corroborates it, if any: applied
        where the engine makes them (every method that returns detections), so a verdict
        read after a detection was made never changes it, whatever the adapter."""
        book = self.verdicts
        if not len(book):
            return dets if isinstance(dets, list) else list(dets)
        return [book.corroborate(d) for d in dets]

    def compaction(self, compaction: Compaction) -> list[Detection]:
        """The run's context was compacted (a model span marks it, a coding agent's log
        record says so): a boundary between its steps. Its detections."""
        return self.corroborate(self.engine.compaction(compaction))

    def end_run(self, trace: str, run: str, *, span_id: str = "", parent_run: str | None = None,
                conversation: str | None = None) -> tuple[list[Detection], RunSummary | None]:
        """An agent invocation ended (``parent_run``: the run it was invoked from, for the
        run-scope signature; ``conversation``: the conversation its agent span names, for the
        conversation scope). Its detections and summary."""
        summary = self.engine.end_run(trace, run, span_id=span_id, parent_run_id=parent_run,
                                      conversation_id=conversation)
        released = self._release((trace, run)) if self._held else []
        if summary is None:
            return released, None
        if self.on_summary is not None and (summary.turns or summary.tokens or summary.detections):
            self.on_summary(summary)
        return self.corroborate(summary.detections_list) + released, summary

    def end_trace(self, trace: str) -> tuple[list[Detection], list[RunSummary]]:
        """A trace (or a grouped run) is over: end its runs."""
        summaries = self.engine.end_trace(trace)
        if self.on_summary is not None:
            for summary in summaries:
                self.on_summary(summary)
        dets = self.corroborate([d for s in summaries for d in s.detections_list])
        if self._held:
            for key in [k for k in self._held if k[0] == trace]:
                dets += self._release(key)
        return dets, summaries

    def _release(self, key: tuple[str, str]) -> list[Detection]:
        """A run with detections held back ended: they are reported if the richer signal
        never reported for its session (else dropped)."""
        held = self._held.pop(key, None)
        tag = self._tags.get(key)
        if not held or tag is None or not self.arbiter.first(tag[0], tag[1]):
            return []
        return held  # (its signal now reports for the session: keep() lets them through)

    # -- reporting ------------------------------------------------------------------------

    def _tag_of(self, det: Detection) -> tuple[str, int] | None:
        return self._tags.get((det.trace_id, det.run_id)) if self._tags else None

    def keep(self, det: Detection) -> bool:
        """Streaming (serve, the processor): whether a detection is reported now (one loop,
        one report: the first signal to report for an agent session reports for it; one
        held back for a richer signal comes back with its run's end, see :mod:`.signals`)."""
        tag = self._tag_of(det)
        if tag is None:
            return True
        decision = self.arbiter.decide(tag[0], tag[1])
        if decision == "hold":
            held = self._held.setdefault((det.trace_id, det.run_id), [])
            if len(held) < _MAX_HELD:
                held.append(det)
            if len(self._held) > _MAX_TAGS:
                self._held.popitem(last=False)
        return decision == "report"

    def reported(self, dets: Iterable[Detection]) -> list[Detection]:
        """Streaming: the detections that are reported (:meth:`keep`)."""
        if not self._tags:
            return dets if isinstance(dets, list) else list(dets)
        return [d for d in dets if self.keep(d)]

    def final(self, dets: Iterable[Detection]) -> set[int]:
        """At the end of the input (scan): the ``id()`` of the detections not reported, of
        agent sessions whose other signal reports (the richer one that detected anything)."""
        dets = list(dets)
        detected: dict[str, set[int]] = {}
        for det in dets:
            tag = self._tag_of(det)
            if tag is not None:
                detected.setdefault(tag[0], set()).add(tag[1])
        winners = {session: self.arbiter.winner(session, signals) for session, signals in detected.items()
                   if len(signals) > 1}
        dropped: set[int] = set()
        if winners:
            for det in dets:
                tag = self._tag_of(det)
                if tag is not None and tag[0] in winners and winners[tag[0]] != tag[1]:
                    dropped.add(id(det))
        return dropped

    def evictions(self) -> int:
        """Runs the engine dropped unfinished (its ``max_runs`` and idle limits) since the
        last call."""
        now = self.engine.stats.runs_evicted
        new, self._evicted = now - self._evicted, now
        return max(0, new)


def _steps(pending: list[ToolCall]) -> int:
    """The steps of calls read but not yet evaluated (in start order): as the engine groups
    them, overlapping calls of one parent are one step."""
    steps, end, parent = 0, 0, None
    for call in pending:
        if steps and call.start_ns < end and call.parent_id == parent:
            end = max(end, call.end_ns)
            continue
        steps, end, parent = steps + 1, call.end_ns, call.parent_id
    return steps
