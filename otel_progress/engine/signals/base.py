"""The interface every detection signal implements, and the step it evaluates.

A signal is a small object with no per-run data of its own: the pipeline asks it for a
fresh per-run state (:meth:`Signal.new_state`), hands that state back on every step
(:meth:`Signal.evaluate`) and asks the signal to forget the evidence of a loop once a
detection was announced (:meth:`Signal.reset`), so the next detection rests on new
evidence. This mirrors one policy per file behind one evaluator interface.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...model import Compaction, Finding, Scope

if TYPE_CHECKING:
    from ..config import Config
    from ..runstate import RunState

__all__ = ["CallFacts", "Signal", "Step", "count_last", "holds", "record_visit"]

_BYTE_ORDER = sys.byteorder  # as array("q") lays out its items


@dataclass(slots=True)
class CallFacts:
    """The digests of one tool call, computed once and shared by every signal."""

    tool: str
    key: int | None  # name + canonical arguments + result (or error); None: not comparable
    call: int  # name + canonical arguments: the request alone (wait episodes, notes)
    result: int | None  # process-local digest of the result (volatile fields stripped); None if absent
    parsed_result: Any  # the result parsed from JSON where it was JSON, else as given
    empty: bool  # the result carries nothing (empty list/map/string, "0 results", ...)
    ack: bool  # the result is a bare acknowledgement ("ok", "Successfully modified x")
    error: int | None  # error signature digest, None if the call succeeded
    action: int | None  # process-local digest of the normalised action; None: no content
    args: Any  # the arguments, parsed from JSON where they were JSON (None: absent)
    span_id: str
    command: bool = False  # the arguments carry a command (a shell/terminal-style call)
    silent: bool = False  # the result has no text at all (not even "0 results")
    # an undeclared change to the world: a bare acknowledgement answering a request that
    # differs from the tool's previous one, or a new command that succeeded silently
    world: bool = False
    repeat: bool = False  # the request is the same as the tool's previous request
    wait: bool = False  # a successful command that waits on purpose (``sleep 5 && cat log``)
    wait_command: bool = False  # a command that waits on purpose, whether it failed or not
    incidental: bool = False  # the result rewords the tool's previous answer to this request
    # the result is only a size or a truncated preview (evidence level "arguments"): a
    # differing one is new, an equal one proves nothing (never "the same result")
    partial: bool = False
    # the state of the location the result shows (location and what it showed there,
    # see views.py); None: the result names no location
    place: int | None = None
    # what the world answered, compared across requests (signals/answer.py): the failure's
    # identity, or the result with volatile tokens masked; None: not an answer to compare
    # (empty, partial, a write's own echo, or not captured)
    answer: int | None = None
    # the request carries content of its own (a file's text, a patch: content.echoes_request)
    writes: bool = False


@dataclass(slots=True)
class Step:
    """One turn: a tool call, or a batch of parallel calls from one model response."""

    turn: int
    calls: tuple[Any, ...]  # the ToolCall objects
    facts: tuple[CallFacts, ...]
    key: int | None  # sorted multiset of call keys; None if any call is not comparable
    tool: str  # tool names, sorted and joined by "+"
    start_ns: int
    end_ns: int
    span_id: str  # the span a detection on this step is reported on
    tokens: int  # run tokens consumed up to this step
    new_evidence: int = 0  # result digests never seen before in the run
    exempt: bool = False  # a legitimate wait: repeat/frequency/barren skip this step
    wrote: bool = False  # a successful call of a tool declared "write"
    world: bool = False  # a call of the step changed the world undeclared (CallFacts.world)
    # goal, plan node, evidence part, obligations, blocked_on: the state signature's
    # parts other than the actions (None: the step has no signature)
    signature_parts: tuple[str, str, str, str, str] | None = None
    partial: bool = False  # a call of the step has a partial result (CallFacts.partial)
    # a re-read expected after a compaction (signals/compaction.py): exempt too, and the
    # location signal does not count it as a revisit
    recovery: bool = False


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


def holds(window: array[int], value: int) -> bool:
    """``value in window`` for an array of 64-bit integers, without the Python object
    each element would become: a byte search for the value's 8 bytes, kept only where a
    hit lines up with an element (a hit across two elements is not the value)."""
    data = window.tobytes()
    needle = value.to_bytes(8, _BYTE_ORDER, signed=True)
    i = data.find(needle)
    while i > 0 and i % 8:
        i = data.find(needle, i + 1)
    return i >= 0


def count_last(window: array[int], value: int) -> int:
    """``window.count(value)`` where ``value`` is ``window[-1]``: how often the last value
    occurs in the window. The usual answer is 1 (no earlier copy), known when a byte search
    for the value's 8 bytes first hits at the last element (an earlier element equal to it
    would be hit before); otherwise the elements are counted."""
    data = window.tobytes()
    if data.find(value.to_bytes(8, _BYTE_ORDER, signed=True)) == len(data) - 8:
        return 1
    return window.count(value)


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
