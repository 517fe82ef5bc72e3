"""The interface of the model-side signals: the signals that judge what the model said and
asked for (:class:`~otel_progress.model.ModelOutput`), not what a tool answered.

A model output is not a step of the run: steps are tool calls, the only place the world
answers (seed 000). The model side therefore has its own small step,
:class:`ModelStep`, made by the pipeline
(:class:`~otel_progress.engine.modelside.ModelSide`) for each model output and for
each tool call the harness or the user refused (``ToolCall.executed`` False), and its own
signals, :class:`ModelSignal`: like :class:`~.base.Signal` they keep no per-run data of
their own; the run's part lives in :class:`~otel_progress.engine.modelside.ModelRun`, made
on the run's first model output (a run that never has one pays nothing). Their findings
climb the same escalation ladder as every other reason
(:meth:`~otel_progress.engine.pipeline.Pipeline.escalate`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...model import Finding, ModelOutput

if TYPE_CHECKING:
    from ...evidence.canonical import Digester
    from ..config import Config
    from ..runstate import RunState

__all__ = ["CAUSE_REFUSED", "CAUSE_UNANSWERED", "ModelSignal", "ModelStep", "Unexecuted"]

#: :attr:`Unexecuted.cause`: the harness or the user refused the call (a decision record).
CAUSE_REFUSED = "refused"
#: :attr:`Unexecuted.cause`: no tool call of the run answered the request by the time the
#: model answered again (an unknown tool, arguments that did not parse, a dropped call).
CAUSE_UNANSWERED = "unanswered"


@dataclass(frozen=True, slots=True)
class Unexecuted:
    """A tool request that never ran.

    Attributes:
        request: the process-local digest of the tool name and its canonical arguments
            (:meth:`~otel_progress.engine.modelside.request_digest`): what "the same
            request" means.
        tool: the requested tool's name.
        cause: :data:`CAUSE_REFUSED` or :data:`CAUSE_UNANSWERED`.
    """

    request: int
    tool: str
    cause: str


@dataclass(frozen=True, slots=True)
class ModelStep:
    """What the model-side signals evaluate: one model output, or one refused tool call.

    Attributes:
        output: the model output (``None`` for a refused tool call).
        news: whether something new reached the run since the previous model step: a tool
            step admitted a result the run had not seen, wrote, changed the world, advanced
            the plan or the goal, or the user sent a new message (a new ``prompt``).
        unexecuted: the requests found never executed at this step: the previous output's
            requests that no tool call answered, or the refused call.
        turn: the run's turn (its tool steps so far): a model step is not a step of its own.
        span_id, start_ns, end_ns: the output's (or the refused call's) span and times.
    """

    output: ModelOutput | None
    news: bool
    unexecuted: tuple[Unexecuted, ...]
    turn: int
    span_id: str
    start_ns: int
    end_ns: int


class ModelSignal(ABC):
    """One model-side signal.

    Subclasses set :attr:`name` (the config name used in ``disabled_signals``) and
    implement :meth:`new_state` and :meth:`evaluate`.
    """

    name: str = ""

    def __init__(self, config: Config, digester: Digester) -> None:
        self.config = config
        self.digester = digester

    @abstractmethod
    def new_state(self) -> Any:
        """A fresh per-run state (made on the run's first model step; keep it small)."""

    @abstractmethod
    def evaluate(self, step: ModelStep, state: Any, run: RunState) -> Finding | None:
        """Observe ``step`` and report a finding if the signal's condition holds now."""

    def reset(self, state: Any) -> Any:
        """Forget the evidence of the announced loop; returns the state to keep."""
        return self.new_state()

    def executed(self, state: Any, request: int) -> None:
        """A tool call of the run ran the request with this digest (name and canonical
        arguments): the model side is told of each executed call once the run has a model
        state. Does nothing unless the signal counts requests."""
        return None
