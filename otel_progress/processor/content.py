"""The run-time warnings when tool spans arrive without content, or do not arrive at all.

Without arguments or results on the tool spans, otel-progress can only count recurring
errors (names alone are never compared), and most set-ups that fail, fail silently.
:class:`ContentWatch` logs (logger ``otel_progress``, level WARNING):

* once per process, when the first :data:`WARN_AFTER` tool spans all arrived without
  content, naming the instrumentation that made them and the setting to change, from the
  table in :mod:`otel_progress.conventions.content_settings` (the one ``otel-progress doctor`` reports);
* once per run (a trace whose local root span ended) that could not be checked and was not
  covered by that warning: a run with GenAI spans but no tool span in a convention
  otel-progress reads (smolagents' own instrumentation, CrewAI through OpenLLMetry), or a
  run whose tool spans, fewer than :data:`WARN_AFTER`, all came without content. A run one
  of whose model spans carried the model's output (:meth:`ContentWatch.model_output`) could
  be checked on the model's side and is no such run. At most one such line per
  :data:`RUN_WARNING_SECONDS`; the runs in between are counted in the next.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from .sdk import scope_name

__all__ = ["MAX_TRACKED_RUNS", "RUN_WARNING_SECONDS", "WARN_AFTER", "ContentWatch"]

#: Tool spans in a row without content, none with content before them, before the warning.
WARN_AFTER = 10
#: At most one per-run warning line in this many seconds (the others are counted).
RUN_WARNING_SECONDS = 60.0
#: Runs (traces) followed at once; the oldest is forgotten past it.
MAX_TRACKED_RUNS = 4096

_log = logging.getLogger("otel_progress")


def _advice(attributes: Mapping[str, Any], scope: str) -> str:
    try:
        from ..conventions.content_settings import advice_for_span

        return advice_for_span(attributes, os.environ, scope)
    except Exception:  # (the table is another module's: never let it break the processor)
        return "enable the instrumentation's content capture"


class _Run:
    __slots__ = ("attributes", "genai", "scope", "tools")

    def __init__(self) -> None:
        self.tools = 0  # tool spans without content
        self.genai = 0  # GenAI spans that are not tool spans
        self.attributes: Mapping[str, Any] = {}
        self.scope = ""


class ContentWatch:
    """Counts tool spans without content until the first one with content (or the
    warning), and, per run, what could not be checked. A run that had a tool span with
    content is forgotten at once."""

    def __init__(self, warn_after: int = WARN_AFTER, every_s: float = RUN_WARNING_SECONDS) -> None:
        self.done = False
        self.warned = False
        self._without = 0
        self._warn_after = max(1, warn_after)
        self._lock = threading.Lock()
        self._runs: OrderedDict[int, _Run | None] = OrderedDict()  # None: the run had content
        self._every = every_s
        self._next_log = 0.0
        self._unlogged = 0
        #: runs that ended without anything otel-progress could check (warned or counted)
        self.runs_unchecked = 0

    def seen(self, captured: bool, attributes: Mapping[str, Any], scope: str = "", trace: int | None = None) -> None:
        """A tool span was read: ``captured`` says whether it carried content;
        ``scope``: its instrumentation scope name; ``trace``: its trace id."""
        if trace is not None:
            self._tool_of_run(trace, captured, attributes, scope)
        if self.done:
            return
        if captured:
            self.done = True
            return
        with self._lock:
            if self.done:
                return
            self._without += 1
            if self._without < self._warn_after:
                return
            self.done = self.warned = True
        _log.warning(
            "otel-progress: the first %d tool spans carried no arguments or results, so loops cannot be"
            " detected (only recurring errors). %s. `otel-progress doctor` shows the settings in effect."
            " (Logged once.)", self._without, _advice(attributes, scope))

    def tool_call(self, call: Any, span: Any, attrs: Mapping[str, Any]) -> None:
        """The run tracker read a tool call (``call.captured``: with content) from this
        span: :meth:`seen`, with the span's scope and trace id."""
        context = getattr(span, "context", None)
        self.seen(call.captured, attrs, scope_name(span), getattr(context, "trace_id", None))

    def _run(self, trace: int) -> _Run | None:
        runs = self._runs
        run = runs.get(trace, False)
        if run is False:
            run = runs[trace] = _Run()
            if len(runs) > MAX_TRACKED_RUNS:
                runs.popitem(last=False)
        return run  # type: ignore[return-value]

    def _had_content(self, trace: int) -> None:
        """Mark the run as checked (``None``: nothing to say at its end), within the bound:
        a run whose root span never ends must not stay here for ever."""
        runs = self._runs
        if trace in runs:
            runs[trace] = None
            return
        runs[trace] = None
        if len(runs) > MAX_TRACKED_RUNS:
            runs.popitem(last=False)

    def _tool_of_run(self, trace: int, captured: bool, attributes: Mapping[str, Any], scope: str) -> None:
        with self._lock:
            if captured:
                self._had_content(trace)
                return
            run = self._run(trace)
            if run is not None:
                run.tools += 1
                if not run.attributes:
                    run.attributes, run.scope = dict(attributes), scope

    def model_output(self, trace: int) -> None:
        """A model span of the run carried the model's output (its text, reasoning or
        requests): the run can be checked on the model's side (``text_repeat``,
        ``unexecuted_repeat``), so its end says nothing."""
        with self._lock:
            self._had_content(trace)

    def genai_span(self, trace: int, attributes: Mapping[str, Any], scope: str = "") -> None:
        """A GenAI span that is no tool span (an agent, a model call, a chain) ended."""
        with self._lock:
            run = self._run(trace)
            if run is not None:
                run.genai += 1
                if not run.scope:
                    run.scope = scope

    def run_ended(self, trace: int) -> None:
        """The trace's local root span ended: say so if the run could not be checked."""
        if trace not in self._runs:
            return  # (every root span ends here: the usual case takes no lock)
        with self._lock:
            run = self._runs.pop(trace, None)
            if run is None or (run.tools == 0 and run.genai == 0):
                return
            if run.tools and self.warned:
                return  # the process-wide warning said it already
            self.runs_unchecked += 1
            now = time.monotonic()
            if now < self._next_log:
                self._unlogged += 1
                return
            self._next_log = now + self._every
            more, self._unlogged = self._unlogged, 0
        tail = f" ({more} more run(s) like it since the last such message.)" if more else ""
        trace_hex = format(trace, "032x")
        if run.tools:
            _log.warning(
                "otel-progress: the %d tool span(s) of run %s carried no arguments or results, so its loops"
                " could not be checked (only recurring errors). %s. `otel-progress doctor` shows the settings in"
                " effect.%s", run.tools, trace_hex, _advice(run.attributes, run.scope), tail)
        else:
            _log.warning(
                "otel-progress: run %s ended with %d GenAI span(s) (instrumentation scope %s) but no tool span"
                " in a convention otel-progress reads, so nothing in it could be checked for loops. Run"
                " `otel-progress doctor -- <your command>` to see the spans it makes; the README lists the"
                " instrumentations whose tool spans are read.%s", trace_hex, run.genai, run.scope or "unknown", tail)
