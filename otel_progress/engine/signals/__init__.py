"""The detection signals, one per module, behind :class:`~.base.Signal`.

:func:`build_signals` returns the enabled agent-scope signals in pipeline order, cheap
checks first: the wait check (it grants exemptions the others honour), the compaction
boundary's (it exempts the re-read after a compaction), then the window comparisons, the
error counter, the no-progress counter, state and location revisits, and last the state
signature and the published measure. :func:`build_model_signals` returns the enabled
model-side signals (:mod:`.model_base`: what the model said and requested), text repeats
first.
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
from .model_base import ModelSignal
from .repeat import RepeatCycleSignal, find_period
from .revisit import StateRevisitSignal
from .run_signature import RunSignatureSignal
from .signature import SignatureSignal
from .text import TextRepeatSignal
from .unexecuted import UnexecutedSignal
from .wait import WaitSignal

if TYPE_CHECKING:
    from ...evidence.canonical import Digester
    from ..config import Config

__all__ = [
    "BarrenSignal",
    "CompactionSignal",
    "ConversationSignal",
    "ErrorRecurrenceSignal",
    "FrequencySignal",
    "LocationRevisitSignal",
    "MeasureSignal",
    "ModelSignal",
    "RepeatCycleSignal",
    "RunSignatureSignal",
    "SameAnswerSignal",
    "Signal",
    "SignatureSignal",
    "StateRevisitSignal",
    "TextRepeatSignal",
    "TurnRecord",
    "UnexecutedSignal",
    "WaitSignal",
    "build_model_signals",
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

_MODEL_SIGNALS: tuple[type[ModelSignal], ...] = (TextRepeatSignal, UnexecutedSignal)


def build_model_signals(config: Config, digester: Digester) -> tuple[ModelSignal, ...]:
    """The enabled model-side signals, in pipeline order."""
    return tuple(cls(config, digester) for cls in _MODEL_SIGNALS if config.enabled(cls.name))
