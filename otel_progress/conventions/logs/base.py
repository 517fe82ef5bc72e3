"""The reader interface every log convention (one coding agent's log events) implements.

A :class:`LogConvention` turns one :class:`~otel_progress.conventions.logs.record.LogRecordView` into
a :class:`LogObservation`: a tool call, a token count, or nothing the engine needs. It
names the ``event_names`` it reads, so the registry dispatches on the record's event name
without asking every reader. ``read`` must be total: attribute values come from other
people's programs (strings where numbers are expected, ``"true"`` for booleans, truncated
JSON), and nothing may raise on them; a reader answers ``None`` for a record it cannot use.
"""

from __future__ import annotations

from typing import NamedTuple

from ...model import Compaction, ModelOutput, ToolCall
from ...model.verdicts import Verdict
from .record import LogRecordView

__all__ = [
    "EVIDENCE_ARGUMENTS",
    "EVIDENCE_FULL",
    "EVIDENCE_NAMES",
    "LogConvention",
    "LogObservation",
]

#: Arguments and the complete result are known: every signal applies.
EVIDENCE_FULL = "full"
#: Arguments are known, the result only as a size or a truncated preview: equal sizes or
#: equal truncated previews never prove equal results.
EVIDENCE_ARGUMENTS = "arguments"
#: Only tool names and success are known: only error recurrence applies.
EVIDENCE_NAMES = "names"


class LogObservation(NamedTuple):
    """What a reader found in one log record.

    Attributes:
        kind: ``"tool"`` (``call`` is set), ``"tokens"`` (``tokens`` is set),
            ``"compaction"`` (``compaction`` is set: the agent compacted its context),
            ``"verdict"`` (``verdict`` is set: another detector said the run loops) or
            ``"other"`` (known to the reader, nothing for the engine).
        run_key: the run the record belongs to, prefixed by the convention's name (e.g.
            ``"claude_code|<session.id>|<prompt.id>"``); records of one run share it. With
            ``session_wide`` it is the prefix every run of one agent session shares (the
            record names the session, not the prompt: Gemini CLI's ``chat_compression``);
            it then belongs to the session's run seen last.
        order: the sort key of the record inside its run (e.g. ``(event.sequence,)`` or
            ``(time_ns, index)``); only compared with keys of the same run.
        call: the tool call, for ``kind == "tool"``.
        tokens: tokens consumed (input + output), for ``kind == "tokens"``.
        agent: the agent's name (e.g. ``"claude-code"``), for annotations and metrics.
        evidence_level: :data:`EVIDENCE_FULL`, :data:`EVIDENCE_ARGUMENTS` or
            :data:`EVIDENCE_NAMES`: what the record lets a detector conclude.
        compaction: the compaction, for ``kind == "compaction"``.
        session_wide: ``run_key`` names the session only (see ``run_key``).
        input_tokens: the input part of ``tokens`` (the context the model read, cached
            input included), for ``kind == "tokens"``.
        output: what the model answered (its text, reasoning, requested tool calls), for
            ``kind == "tokens"`` when the record carries the response (Gemini CLI's
            ``response_text``); the run tracker sets its run and id.
        verdict: another detector's verdict that the run loops, for ``kind == "verdict"``
            (Gemini CLI's ``loop_detected``): kept with the run as corroboration, never
            reported by itself (:mod:`otel_progress.model.verdicts`).
    """

    kind: str
    run_key: str
    order: tuple = ()
    call: ToolCall | None = None
    tokens: int = 0
    agent: str | None = None
    evidence_level: str = EVIDENCE_FULL
    compaction: Compaction | None = None
    session_wide: bool = False
    input_tokens: int = 0
    output: ModelOutput | None = None
    verdict: Verdict | None = None


class LogConvention:
    """Base class of a log convention: one coding agent's (or library's) log events.

    Attributes:
        name: short name of the convention (the ``run_key`` prefix; for docs and logs).
        event_names: the event names this convention reads; the registry asks it about a
            record only when the record's ``event_name`` is one of them.
    """

    name: str = "log-convention"
    event_names: frozenset[str] = frozenset()

    def read(self, record: LogRecordView) -> LogObservation | None:
        """The observation in ``record``, or ``None`` (not usable). Never raises."""
        return None
