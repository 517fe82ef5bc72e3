"""Conversation scope: what one turn of a conversation asked the world and what it answered.

A conversation is the runs that share ``gen_ai.conversation.id`` (or ``session.id``) across
traces, one agent run (one ``invoke_agent`` span) per user turn. This signal never fires on
a step: it records, in the run's state, the turn's requests together with what the world
answered (each successful call's key: tool, canonical arguments and result digest, the
same key the repeat signals compare). When the run ends, the engine compares that record
with the conversation's earlier turns (:mod:`otel_progress.engine.conversations`).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from typing import Any

from ...model import Finding, Scope
from ..step import Step
from .base import Signal

__all__ = ["ConversationSignal", "TurnRecord"]


class TurnRecord:
    """One run's requests and answers, for the conversation it belongs to.

    Attributes:
        items: the distinct keys (request and answer) of the run's successful calls, sorted
            (8 bytes each).
        unknown: a successful call of the run has no key (its result was not captured, or
            the call moved between locations), or the turn made more distinct requests than
            ``max_evidence``: the turn cannot be said to bring nothing new.
    """

    __slots__ = ("items", "unknown")

    def __init__(self) -> None:
        self.items = array("q")
        self.unknown = False

    def add(self, key: int, cap: int) -> None:
        """Record a key (the turn becomes unknown past ``cap`` distinct keys)."""
        items = self.items
        i = bisect_left(items, key)
        if i < len(items) and items[i] == key:
            return
        if len(items) >= cap:
            self.unknown = True
            return
        items.insert(i, key)

    def merge(self, other: TurnRecord, cap: int) -> None:
        """Add a sub-agent's record to the record of the run that invoked it."""
        if other.unknown:
            self.unknown = True
        for key in other.items:
            if self.unknown:
                return
            self.add(key, cap)

    @property
    def judged(self) -> bool:
        """Whether the turn can be compared: it made a successful call whose request and
        answer are known, and none that is not."""
        return bool(self.items) and not self.unknown


class ConversationSignal(Signal):
    """Records each step's requests and answers in the run's :class:`TurnRecord`; never
    reports a finding of its own (the comparison is made when the run ends, across the
    conversation's turns)."""

    name = "conversation"
    scope = Scope.CONVERSATION

    def new_state(self) -> TurnRecord:
        return TurnRecord()

    def evaluate(self, step: Step, state: Any, run: Any) -> Finding | None:
        if state.unknown:
            return None
        cap = self.config.max_evidence
        for call, facts in zip(step.calls, step.facts, strict=False):
            if call.error:
                continue  # a failure brings nothing new, nor anything old: not recorded
            key = facts.key
            if key is None:
                state.unknown = True
                return None
            state.add(key, cap)
        return None

    def reset(self, state: Any) -> Any:
        """A detection in the run does not erase what its turn asked and got back."""
        return state
