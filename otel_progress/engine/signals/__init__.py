"""The detection signals, one per module, behind :class:`~.base.Signal`.

:func:`build_signals` returns the enabled agent-scope signals in pipeline order, cheap
checks first: the wait check (it grants exemptions the others honour), the compaction
boundary's (it exempts the re-read after a compaction), then the window comparisons, the
error counter, the no-progress counter, state and location revisits, and last the state
signature and the published measure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .answer import SameAnswerSignal
from .barren import BarrenSignal
from .base import Signal
from .compaction import CompactionSignal
from .conversation import ConversationSignal, TurnRecord
from .errors import ErrorRecurrenceSignal
from .frequency import FrequencySignal
from .location import LocationRevisitSignal
from .measure import MeasureSignal
from .repeat import RepeatCycleSignal, find_period
from .revisit import StateRevisitSignal
from .run_signature import RunSignatureSignal
from .signature import SignatureSignal
from .wait import WaitSignal

if TYPE_CHECKING:
    from ..config import Config

__all__ = [
    "BarrenSignal",
    "CompactionSignal",
    "ConversationSignal",
    "ErrorRecurrenceSignal",
    "FrequencySignal",
    "LocationRevisitSignal",
    "MeasureSignal",
    "RepeatCycleSignal",
    "RunSignatureSignal",
    "SameAnswerSignal",
    "Signal",
    "SignatureSignal",
    "StateRevisitSignal",
    "TurnRecord",
    "WaitSignal",
    "build_signals",
    "find_period",
]

_AGENT_SIGNALS: tuple[type[Signal], ...] = (
    # first: it records every step of the run (it never fires), whatever the others find
    ConversationSignal,
    WaitSignal,
    CompactionSignal,
    RepeatCycleSignal,
    FrequencySignal,
    ErrorRecurrenceSignal,
    BarrenSignal,
    StateRevisitSignal,
    LocationRevisitSignal,
    SignatureSignal,
    MeasureSignal,
    SameAnswerSignal,
)


def build_signals(config: Config) -> tuple[Signal, ...]:
    """The enabled agent-scope signals, in pipeline order."""
    return tuple(cls(config) for cls in _AGENT_SIGNALS if config.enabled(cls.name))
