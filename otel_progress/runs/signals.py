"""One loop, one report: an agent whose tool calls reach the engine through two signals.

A coding CLI that exports both its log events and its traces (Gemini CLI and Qwen Code do
by default; Claude Code with its beta traces) sends every tool call twice, once as a log
record and once as a span, to the same scan or service. The two are analysed as separate
runs (their boundaries differ: a log run is one prompt, a trace may group a session), so
one loop would be reported once per signal.

:class:`SignalArbiter` keeps, per agent session (the session id both signals carry, see
:mod:`.identity`), the richest evidence each signal has brought (content over arguments
over names, :func:`~otel_progress.runs.identity.evidence_rank`), and lets one signal
report for the session:

* a scan decides at the end, on everything it read (:meth:`SignalArbiter.winner`): the
  richer signal (spans on a tie) if it detected anything, else the other one;
* the service and the processor decide as they report (:meth:`SignalArbiter.decide`): the
  signal that reported first for the session goes on reporting (its escalations), the
  other one's detections for the session are not reported; a detection of the poorer
  signal while the richer one has been seen and has not reported is held back until its
  run ends, and reported then only if the richer one never reported for the session.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["LOGS", "SIGNAL_NAMES", "SPANS", "SignalArbiter"]

SPANS, LOGS = 0, 1
SIGNAL_NAMES = ("spans", "logs")
_NONE = -1


class SignalArbiter:
    """Per agent session, the evidence each signal brought and which signal reports
    (bounded: the least recently seen sessions are forgotten first; a forgotten session's
    signals both report)."""

    def __init__(self, max_sessions: int = 65_536) -> None:
        # session -> [best rank of spans, best rank of logs, the signal that reported first]
        self._sessions: OrderedDict[str, list[int]] = OrderedDict()
        self._max = max_sessions

    def __len__(self) -> int:
        return len(self._sessions)

    def _entry(self, session: str) -> list[int]:
        entry = self._sessions.get(session)
        if entry is None:
            entry = self._sessions[session] = [0, 0, _NONE]
            if len(self._sessions) > self._max:
                self._sessions.popitem(last=False)
        return entry

    def saw(self, session: str, signal: int, rank: int) -> None:
        """A tool call of ``session`` came through ``signal`` with evidence ``rank``."""
        entry = self._entry(session)
        if rank > entry[signal]:
            entry[signal] = rank

    def both(self, session: str) -> bool:
        """Whether both signals of ``session`` have brought tool calls."""
        entry = self._sessions.get(session)
        return entry is not None and entry[SPANS] > 0 and entry[LOGS] > 0

    def first(self, session: str | None, signal: int) -> bool:
        """Streaming: whether a detection of ``session`` through ``signal`` may be reported
        (no other signal reported for the session before it); if so, ``signal`` is now the
        session's reporting signal."""
        if session is None:
            return True
        entry = self._entry(session)
        if entry[2] == _NONE:
            entry[2] = signal
        return entry[2] == signal

    def decide(self, session: str, signal: int) -> str:
        """Streaming: ``"report"``, ``"drop"`` (the other signal reports for the session) or
        ``"hold"`` (the other signal has brought richer evidence and has not reported yet:
        it may; the detection waits for the end of its run)."""
        entry = self._entry(session)
        other = 1 - signal
        if entry[2] == other:
            return "drop"
        if entry[2] == _NONE and entry[other] > entry[signal]:
            return "hold"
        entry[2] = signal
        return "report"

    def winner(self, session: str, detected: set[int]) -> int | None:
        """At the end: the signal whose detections of ``session`` are reported, given the
        signals that ``detected`` something (None: neither)."""
        if len(detected) < 2:
            return next(iter(detected), None)
        entry = self._sessions.get(session, [0, 0, _NONE])
        return LOGS if entry[LOGS] > entry[SPANS] else SPANS

    def state_of(self, session: str) -> tuple[int, int, int] | None:
        """What is known of ``session`` (to carry it to another process), or None."""
        entry = self._sessions.get(session)
        return None if entry is None else (entry[0], entry[1], entry[2])

    def adopt(self, session: str, state: tuple[int, int, int]) -> None:
        """Continue ``session`` from :meth:`state_of` of another process: the richest
        evidence of each signal is the better of both, and a signal that reported for it
        there reports for it here."""
        entry = self._entry(session)
        entry[SPANS] = max(entry[SPANS], int(state[SPANS]))
        entry[LOGS] = max(entry[LOGS], int(state[LOGS]))
        if int(state[2]) in (SPANS, LOGS):
            entry[2] = int(state[2])
