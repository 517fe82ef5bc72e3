"""Provisional runs of a trace replayed a request at a time (:mod:`.traces`).

A span whose ancestors have not arrived yet (its agent span ends after it) is put in the
run of its first unknown ancestor, which is the agent span when the tool span is its child
(every GenAI instrumentation) and always the same span for the spans of one invocation.
When that ancestor arrives the guess is settled: an agent span confirms it; a span that is
not an agent gives its run away to where it belongs (the engine renames the run) when that
run has no state of its own yet; an agent whose parent is unknown is taken for a sub-agent
of that parent when the parent has calls of its own. A guess that turns out wrong (a
plan-node span whose name the calls lacked, a tool span that nests them, a run to merge)
is a **conflict**: the trace is analysed again whole.

What each unknown ancestor was taken for is kept per trace, in its state's ``open``
(ancestor id -> flags).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..conventions.spans import SpanKind
from ..engine import ProgressEngine

if TYPE_CHECKING:
    from .opentraces import TraceState

__all__ = ["ProvisionalRuns"]

# What a provisional run's ancestor was taken for.
_FED, _NONODE, _PARENT, _NOTPARENT = 1, 2, 4, 8


class ProvisionalRuns:
    """The guesses made for spans whose ancestors have not arrived, and their settling
    (see the module docstring). The replay calls :meth:`resolve` and :meth:`parent_run`
    (:class:`~.replay.Replay`'s ``resolve`` and ``parent_run``), the driver :meth:`settle`
    when an ancestor arrives."""

    def __init__(self, engine: ProgressEngine) -> None:
        self.engine = engine

    def resolve(self, st: TraceState, parent_id: str) -> tuple[str, str | None, str | None, bool]:
        """The run, agent, plan node and nesting of a span under ``parent_id``: its first
        unknown ancestor's run when the lineage stops short."""
        run, agent, node, nested, unknown = st.lineage.walk(parent_id)
        if not unknown:
            return run, agent, node, nested
        if not nested:
            st.open[unknown] = st.open.get(unknown, 0) | _FED | (_NONODE if node is None else 0)
        return unknown, agent, node, nested

    def parent_run(self, st: TraceState, agent_id: str) -> str | None:
        """The run an agent was invoked from (``""``: none), guessed when its parent's
        lineage stops short."""
        entry = st.lineage.entry(agent_id)
        if entry is None:
            return ""
        run, _agent, _node, _nested, unknown = st.lineage.walk(entry[0])
        if not unknown:
            return run
        # A sub-agent of that ancestor if it has calls of its own (then it is an agent), else top-level.
        if self.engine.run_state(st.trace_id, unknown) is not None:
            st.open[unknown] = st.open.get(unknown, 0) | _PARENT
            return unknown
        st.open[unknown] = st.open.get(unknown, 0) | _NOTPARENT
        return ""

    def settle(self, st: TraceState, span_id: str) -> bool:
        """An ancestor taken for a provisional run arrived: settle the guess; True if it was
        wrong in a way only a second analysis repairs (a conflict)."""
        flags = st.open.pop(span_id)
        entry = st.lineage.entry(span_id)
        if entry is None:
            return False
        if flags & _FED and self.engine.run_state(st.trace_id, span_id) is None:
            flags &= ~(_FED | _NONODE)  # nothing was observed in its run after all (a grouped call)
        kind = entry[1]
        if kind is SpanKind.AGENT:
            return bool(flags & _NOTPARENT)  # (a sub-agent taken for a top-level agent)
        if flags & _PARENT:
            return True  # taken for the parent agent of a sub-agent, and is none
        run, _agent, _node, nested, unknown = st.lineage.walk(entry[0])
        if flags & _NOTPARENT:
            if unknown:
                st.open[unknown] = st.open.get(unknown, 0) | _NOTPARENT
            elif run:
                return True  # the agent taken for top-level is a sub-agent
        if not flags & _FED:
            return False
        if kind is SpanKind.TOOL or flags & _NONODE or nested:
            return True  # the calls are nested in a tool call, or lacked their plan node
        if self.engine.run_state(st.trace_id, span_id) is not None:
            target = unknown or run
            if not self.engine.rename_run(st.trace_id, span_id, target):
                return True  # two runs to merge
            if span_id in st.pending:
                st.pending.setdefault(target, []).extend(st.pending.pop(span_id))
        if unknown:
            st.open[unknown] = st.open.get(unknown, 0) | _FED
        return False

    @staticmethod
    def unsettled(st: TraceState) -> int:
        """How many unknown ancestors of the trace had calls put in their runs."""
        return sum(1 for flags in st.open.values() if flags & _FED)
