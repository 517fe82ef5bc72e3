"""One loop, one report: an agent whose tool calls reach the engine through two signals.

A coding CLI that exports both its log events and its traces (Gemini CLI and Qwen Code do
by default; Claude Code with its beta traces) sends every tool call twice, once as a log
record and once as a span, to the same scan or service. The two are analysed as separate
runs (their boundaries differ: a log run is one prompt, a trace may group a session), so
one loop would be reported once per signal.

:class:`SignalArbiter` keeps, per agent session (the session id both signals carry, see
:mod:`.identity`), the richest evidence each signal has brought so far (content over
arguments over names, :func:`~otel_progress.runs.identity.evidence_rank`), and reports the
detections of one signal only: the richer one, spans on a tie. A scan decides at the end,
on everything it read; the service decides when it reports, on what it has seen by then
(a loop already reported on the logs before the first span of the session arrived stays
reported).
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["LOGS", "SIGNAL_NAMES", "SPANS", "SignalArbiter"]

SPANS, LOGS = 0, 1
SIGNAL_NAMES = ("spans", "logs")


class SignalArbiter:
    """Per agent session, the signal whose detections are reported (bounded: the least
    recently seen sessions are forgotten first, and then both signals report)."""

    def __init__(self, max_sessions: int = 65_536) -> None:
        self._best: OrderedDict[str, list[int]] = OrderedDict()
        self._max = max_sessions

    def __len__(self) -> int:
        return len(self._best)

    def saw(self, session: str, signal: int, rank: int) -> None:
        """A tool call of ``session`` came through ``signal`` with evidence ``rank``."""
        best = self._best.get(session)
        if best is None:
            best = self._best[session] = [0, 0]
            if len(self._best) > self._max:
                self._best.popitem(last=False)
        if rank > best[signal]:
            best[signal] = rank

    def keep(self, session: str | None, signal: int) -> bool:
        """Whether a detection of ``session`` that came through ``signal`` is reported."""
        if session is None:
            return True
        best = self._best.get(session)
        if best is None:
            return True
        mine, other = best[signal], best[1 - signal]
        return other == 0 or mine > other or (mine == other and signal == SPANS)

    def both(self, session: str) -> bool:
        """Whether both signals of ``session`` have been seen."""
        best = self._best.get(session)
        return best is not None and best[0] > 0 and best[1] > 0
