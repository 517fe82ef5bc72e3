"""The interface every detection signal implements (the step it evaluates is
:class:`~otel_progress.engine.step.Step`), and the helpers signals share.

A signal is a small object with no per-run data of its own: the pipeline asks it for a
fresh per-run state (:meth:`Signal.new_state`), hands that state back on every step
(:meth:`Signal.evaluate`) and asks the signal to forget the evidence of a loop once a
detection was announced (:meth:`Signal.reset`), so the next detection rests on new
evidence. This mirrors one policy per file behind one evaluator interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from ...model import Compaction, Finding, Scope

if TYPE_CHECKING:
    from ..config import Config
    from ..runstate import RunState
    from ..step import Step

__all__ = ["Signal", "record_visit"]


class Signal(ABC):
    """One detection signal.

    Subclasses set :attr:`name` (the config name used in ``disabled_signals``) and
    :attr:`scope`, and implement :meth:`new_state` and :meth:`evaluate`.
    """

    name: str = ""
    scope: Scope = Scope.AGENT

    def __init__(self, config: Config) -> None:
        self.config = config

    @abstractmethod
    def new_state(self) -> Any:
        """A fresh per-run state (any object; keep it small)."""

    @abstractmethod
    def evaluate(self, step: Step, state: Any, run: RunState) -> Finding | None:
        """Observe ``step`` and report a finding if the signal's condition holds now."""

    def reset(self, state: Any) -> Any:
        """Forget the evidence of the announced loop; returns the state to keep."""
        return self.new_state()

    #: Whether :meth:`epoch_ended` does anything (the pipeline calls only those that do).
    uses_epochs: bool = False

    def epoch_ended(self, state: Any) -> Any:
        """The run both changed the world and admitted something new since the last epoch
        (see ``RunState.epoch``); returns the state to keep."""
        return state

    #: Whether :meth:`boundary` does anything (the pipeline calls only those that do).
    uses_boundaries: bool = False

    def boundary(self, state: Any, run: RunState, compaction: Compaction) -> Finding | None:
        """The run's context was compacted here, between two steps (see
        :mod:`.compaction`); a finding if that compaction is one."""
        return None


def record_visit(table: dict[Any, list[Any]], key: Any, value: Any, keep: int, limit: int = 32) -> list[Any]:
    """Append a visit's value (tokens consumed so far, a measure) to ``key``'s last
    ``keep`` visits in a bounded table (the oldest key is forgotten past ``limit``);
    returns those visits."""
    visits = table.get(key)
    if visits is None:
        if len(table) >= limit:
            table.pop(next(iter(table)))
        visits = table[key] = []
    visits.append(value)
    if len(visits) > keep:
        del visits[0]
    return visits
