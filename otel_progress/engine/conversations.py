"""The conversations the engine follows across traces (:class:`ConversationTable`).

A conversation is the agent runs that name the same ``gen_ai.conversation.id`` (or
``session.id``), one run per user turn, usually one trace per turn. When a run that names
one ends, its turn (the requests it made and what the world answered them, recorded by
:class:`~.signals.conversation.ConversationSignal`) is compared with everything the
conversation's earlier turns asked and got back. A turn that brings nothing new (every
request already made in the conversation and answered the same) is *barren*;
``conversation_turns`` barren turns in a row are a ``signature_repeat`` detection with
scope ``conversation``, on the agent span of the last of them. A turn that brings a new
request or a new answer resets the count and the escalation level; a turn that cannot be
judged (no successful tool call, or one whose result is unknown) resets the count.

State is bounded: at most ``max_conversations`` conversations (least recently used forgotten
first), each forgotten ``conversation_ttl_seconds`` after its last turn, each remembering at
most ``4 * max_evidence`` requests (past it the memory is emptied: forgetting can only hide
a loop, never invent one). Not thread-safe: the engine holds its lock.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..model import Detection, Finding, Level, Reason, Scope
from .digests import admit
from .escalation import handoff_note, nudge_text

if TYPE_CHECKING:
    from .config import Config
    from .runstate import RunState
    from .signals.conversation import TurnRecord
    from .tables import TraceState

__all__ = ["ConversationBook", "ConversationState", "ConversationTable", "conversation_detection"]


def conversation_detection(finding: Finding, level: Level, turn: int, run: RunState | None, span_id: str, *,
                           trace_id: str = "", run_id: str = "", tool: str = "") -> Detection:
    """The detection of a loop across a conversation's turns (``finding``, scope
    ``conversation``), announced at ``level`` on the agent span ``span_id`` of the run whose
    end completed it: ``run``, or, when the engine kept no state of that run (its calls were
    its sub-agents'), ``trace_id`` and ``run_id``; ``turn``: the conversation's turns so far."""
    return Detection(
        reason=finding.reason,
        turn=turn,
        level=level,
        scope=Scope.CONVERSATION,
        trace_id=run.trace.trace_id if run is not None else trace_id,
        span_id=span_id,
        run_id=run.run_id if run is not None else run_id,
        agent=run.agent if run is not None else None,
        tool=tool,
        figures=finding.figures,
        nudge=nudge_text(finding, level, turn, None),
        handoff=handoff_note(finding, turn, run.attempts if run is not None else ()),
        tokens=run.tokens if run is not None else 0,
    )


S = TypeVar("S")


class ConversationBook(Generic[S]):
    """Per-conversation states by key, the least recently used first: at most
    ``max_conversations`` (the least recently used forgotten first), each forgotten
    ``conversation_ttl_seconds`` after its last turn, written out and read back with ages
    (each process has its own monotonic clock). ``make(now)``: a new state; a state has
    ``last_seen``."""

    def __init__(self, config: Config, make: Callable[[float], S]) -> None:
        self.config = config
        self.make = make
        self.table: OrderedDict[str, S] = OrderedDict()

    def __len__(self) -> int:
        return len(self.table)

    def get(self, key: str, now: float) -> S:
        """The state of ``key`` (made if new), marked used at ``now``."""
        table = self.table
        conv = table.get(key)
        if conv is None:
            while len(table) >= self.config.max_conversations:
                table.popitem(last=False)
            conv = table[key] = self.make(now)
        else:
            table.move_to_end(key)
        conv.last_seen = now  # type: ignore[attr-defined]
        return conv

    def snapshot(self, now: float, keys: Iterable[str] | None = None) -> list[tuple[str, S, float]]:
        """The states (of ``keys`` only, when given), least recently used first, each with
        its age (seconds since its last turn): to write out (:meth:`restore` in another
        process)."""
        table = self.table
        items = table.items() if keys is None else [(k, table[k]) for k in keys if k in table]
        return [(key, conv, max(0.0, now - conv.last_seen)) for key, conv in items]  # type: ignore[attr-defined]

    def restore(self, snapshot: Iterable[tuple[str, Any, float]], now: float, kind: type,
                replace: bool = False) -> int:
        """Continue the states of a :meth:`snapshot` that are ``kind`` (an age in it counts
        from ``now``); those this book already holds are kept, or with ``replace`` replaced
        (the snapshot is newer: another process continued them since). Returns how many."""
        restored = 0
        for key, conv, age in snapshot:
            if not isinstance(conv, kind):
                continue
            if key in self.table:
                if not replace:
                    continue
                del self.table[key]
            conv.last_seen = now - float(age)
            self.get(key, conv.last_seen)  # (room made as for a new one)
            self.table[key] = conv
            restored += 1
        return restored

    def evict_idle(self, now: float) -> int:
        """Forget the states whose last turn ended ``conversation_ttl_seconds`` ago; returns
        how many."""
        ttl = self.config.conversation_ttl_seconds
        table = self.table
        dropped = 0
        while table:
            key, conv = next(iter(table.items()))
            if now - conv.last_seen <= ttl:  # type: ignore[attr-defined]
                break
            del table[key]
            dropped += 1
        return dropped


class ConversationState:
    """What the engine remembers of one conversation."""

    __slots__ = ("barren", "burned", "last_seen", "level", "seen", "turns")

    def __init__(self, now: float) -> None:
        self.seen = array("q")  # sorted distinct keys (request and answer) of its turns
        self.turns = 0  # turns ended so far
        self.barren = 0  # barren turns in a row
        self.burned = 0  # the tokens of those turns
        self.level = 0  # escalation level of the loop going on
        self.last_seen = now


class ConversationTable:
    """The conversations followed, and the judgement of each turn that ends.

    Args:
        config: the engine settings (``conversation_turns``, ``max_conversations``,
            ``conversation_ttl_seconds``, ``max_evidence``).
        turn_index: the index of the conversation signal's state in ``RunState.states``
            (its :class:`TurnRecord` of the run's requests and answers).
    """

    def __init__(self, config: Config, turn_index: int) -> None:
        self.config = config
        self.turn_index = turn_index
        self.book: ConversationBook[ConversationState] = ConversationBook(config, ConversationState)
        self.conversations = self.book.table

    def __len__(self) -> int:
        return len(self.book)

    def run_ended(self, trace: TraceState, run: RunState, parent_run_id: str | None,
                  conversation_id: str | None, span_id: str, now: float) -> Detection | None:
        """A run ended: a sub-agent's turn record goes to the run that invoked it; a
        top-level run naming a conversation is judged as one of its turns (:meth:`end_turn`)."""
        record: TurnRecord = run.states[self.turn_index]
        if parent_run_id:
            parent = trace.runs.get(parent_run_id)
            if parent is not None:
                parent.states[self.turn_index].merge(record, self.config.max_evidence)
            return None
        if not conversation_id:
            return None
        return self.end_turn(conversation_id, record, run, span_id, now)

    def end_turn(self, conversation_id: str, record: TurnRecord, run: RunState, span_id: str,
                 now: float) -> Detection | None:
        """The run ``run`` of conversation ``conversation_id`` ended on the agent span
        ``span_id``; the detection to announce, if its turn completes a loop."""
        conv = self.book.get(conversation_id, now)
        conv.turns += 1
        seen = conv.seen
        cap = 4 * self.config.max_evidence
        new = False
        for key in record.items:
            if admit(seen, key, cap):  # a request or an answer the conversation had not seen
                new = True
        if new or not record.judged:
            conv.barren = conv.burned = 0
            if new:
                conv.level = 0  # the conversation learned something: a later loop is nudged afresh
            return None
        conv.barren += 1
        conv.burned += run.tokens
        k = self.config.conversation_turns
        if conv.barren < k:
            return None
        burned = conv.burned
        conv.barren = conv.burned = 0
        if conv.level >= Level.PARK:
            return None  # parked: counted by the caller's stats, not announced again
        conv.level += 1
        finding = Finding(
            Reason.SIGNATURE_REPEAT,
            {"visits": k, "tokens_burned": burned, "conversation_turns": conv.turns,
             "conversation_id": conversation_id},
            f"{k} turns in a row of this conversation made only requests it had already made"
            f" and got the same answers, burning {burned} tokens",
            Scope.CONVERSATION,
        )
        return conversation_detection(finding, Level(conv.level), conv.turns, run, span_id)

    def snapshot(self, now: float, conversations: Iterable[str] | None = None
                 ) -> list[tuple[str, ConversationState, float]]:
        """The conversations (those named, when given) with their ages
        (:meth:`ConversationBook.snapshot`)."""
        return self.book.snapshot(now, conversations)

    def restore(self, snapshot: list[tuple[str, ConversationState, float]], now: float,
                replace: bool = False) -> int:
        """Continue the conversations of a :meth:`snapshot` (``replace``: those followed
        here too are replaced); returns how many."""
        return self.book.restore(snapshot, now, ConversationState, replace)

    def evict_idle(self, now: float) -> int:
        """Forget the conversations whose last turn ended ``conversation_ttl_seconds`` ago;
        returns how many."""
        return self.book.evict_idle(now)
