"""The model's side of a conversation (:class:`ModelTurns`): the same request left
unexecuted, or the same text said, turn after turn.

An application that asks the user before a tool runs (a human-in-the-loop approval) ends
the agent run at the request and resumes the agent in a new run with the user's decision;
one that checks the model's answer and asks again calls the agent again. A model that
asks for the refused call again and again, or gives the rejected answer again and again,
loops across runs that each do it once, so ``unexecuted_repeat`` and ``text_repeat``,
which count within a run, never see it three times. Here the runs are joined: the
top-level runs that name the same conversation (``gen_ai.conversation.id`` or
``session.id``) are the turns of one conversation; a run that names none belongs to the
conversation another agent span of its trace named (the calls outside any agent span: the
trace's own run); the top-level runs of a trace where none is named are the turns of one
(an application span that calls its agent again and again).

A sub-agent's model side counts as the run that invoked it (an agent framework that wraps
its graph in an agent span of its own: the model calls are the inner run's, the
conversation is named on the outer one). When a top-level run ends, its turn (with its
sub-agents') is added to its conversation's earlier turns:

* a turn that brought something new (a tool step that made progress, a new user message)
  forgets what was counted, and the escalation starts over;
* a request the turn executed is forgotten (an approval after a refusal is progress);
* each request the turn left unexecuted counts once more: those the run's
  ``unexecuted_repeat`` counted (refused, or never answered before the model answered
  again), and the requests of the run's last output, which the run ended on (the
  approval the application asked for);
* each text (and reasoning) the turn said counts as many times as it said it, a reworded
  one as the same, by ``text_repeat``'s comparison.

A request unexecuted in ``unexecuted_count`` turns (3), or a text said
``text_repeat_count`` times (3) over two turns or more, with nothing new between, is an
``unexecuted_repeat`` or ``text_repeat`` detection with scope ``conversation``, on the
agent span of the run that completed it; each reason climbs its own ladder. Its healthy
twins stay quiet: a request refused once and then another approach that finds something;
a request approved after a refusal; different user questions, each a new message.

State is bounded like the conversation scope's (``max_conversations``, least recently used
forgotten first; ``conversation_ttl_seconds`` after the last turn), each conversation
counting at most 32 requests and ``text_repeat``'s four texts per part. Not thread-safe:
the engine holds its lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..model import Detection, Finding, Level, Reason, Scope
from .conversations import ConversationBook, conversation_detection

if TYPE_CHECKING:
    from .config import Config
    from .modelside import ModelRun
    from .runstate import RunState
    from .signals.text import TextRepeatSignal

__all__ = ["ModelTurns"]

_MAX_REQUESTS = 32


class _Turns:
    """What one conversation's turns left unexecuted and said since its last news."""

    __slots__ = ("last_seen", "levels", "prompt", "requests", "said", "turns")

    def __init__(self, now: float, said: Any) -> None:
        self.requests: dict[int, list[Any]] = {}  # request digest -> [turns, tool, cause]
        self.said = said  # text_repeat's state: the texts said (None: the signal is off)
        self.prompt: int | None = None  # the latest user message of its turns (hash)
        self.turns = 0
        self.levels: dict[Reason, int] = {}
        self.last_seen = now


class _Turn:
    """One run's model side, as its conversation takes it (with its sub-agents')."""

    __slots__ = ("executed", "left", "news", "prompt", "said")

    def __init__(self, model: ModelRun) -> None:
        self.news = model.progress > 0  # (a new user message: judged against the conversation)
        self.prompt = model.prompt
        self.executed = {call.request for call in model.calls if not call.refused}
        self.left: dict[int, tuple[str, str]] = {}  # request digest -> (tool, cause): unexecuted
        self.said: list[Any] = []  # text_repeat's states of the run and its sub-agents

    def merge(self, other: _Turn) -> _Turn:
        """Add a sub-agent's turn to this one (its invoking run's)."""
        self.news = self.news or other.news
        if self.prompt is None:
            self.prompt = other.prompt
        self.executed |= other.executed
        for request, entry in other.left.items():
            self.left.setdefault(request, entry)
        self.said.extend(other.said)
        return self


class ModelTurns:
    """The conversations' model side (module docstring).

    Args:
        config: the engine settings (``unexecuted_count``, ``max_conversations``,
            ``conversation_ttl_seconds``).
        unexecuted_index: the index of the ``unexecuted`` signal's state in a run's
            :attr:`~otel_progress.engine.modelside.ModelRun.states` (None: it is off).
        text: the ``text_repeat`` signal and the index of its state (None: it is off).
    """

    def __init__(self, config: Config, unexecuted_index: int | None,
                 text: tuple[TextRepeatSignal, int] | None) -> None:
        self.config = config
        self.unexecuted_index = unexecuted_index
        self.text = text
        self.book: ConversationBook[_Turns] = ConversationBook(config, lambda now: _Turns(now, self._fresh_said()))
        self.conversations = self.book.table
        #: (trace, run) -> the turns of its sub-agents that ended, until it ends itself
        self._children: OrderedDict[tuple[str, str], _Turn] = OrderedDict()
        #: trace -> the conversation an agent span of it named ("": none), and that agent span
        #: (for its runs that name none, and its own run, which has no agent span)
        self._named: OrderedDict[str, tuple[str, str]] = OrderedDict()
        #: the runs whose turn was counted, (trace, run) (a run ends once)
        self._ended: OrderedDict[tuple[str, str], None] = OrderedDict()

    def __len__(self) -> int:
        return len(self.book)

    def _fresh_said(self) -> Any:
        return None if self.text is None else self.text[0].new_state()

    def _turn_of(self, run: RunState | None) -> _Turn | None:
        model = None if run is None else run.model
        if model is None:
            return None
        turn = _Turn(model)
        if self.unexecuted_index is not None:
            for request, (_count, tool, cause) in model.states[self.unexecuted_index].items():
                turn.left[request] = (tool, cause)
            for missed in model.unanswered():  # (the run ended on them: no call of it answered them)
                turn.left.setdefault(missed.request, (missed.tool, missed.cause))
        if self.text is not None:
            turn.said.append(model.states[self.text[1]])
        return turn

    def run_ended(self, trace_id: str, run_id: str, run: RunState | None, parent_run_id: str | None,
                  conversation_id: str | None, span_id: str, now: float) -> Detection | None:
        """A run ended on its agent span ``span_id`` (``run``: the engine's state of it, None
        when it kept none). A sub-agent's turn waits for its invoking run
        (``parent_run_id``); a top-level run's turn, with its sub-agents', is added to its
        conversation's (``conversation_id``; else the one another agent span of its trace
        named, as the runs of one trace are of one conversation; else the trace's): the
        detection to announce, if the turn completes a loop. A run with no model output is
        no turn of it."""
        ended = self._ended
        if (trace_id, run_id) in ended:
            return None  # (its trace analysed again whole: the turn was counted when it ended)
        ended[(trace_id, run_id)] = None
        while len(ended) > 4 * self.config.max_conversations:
            ended.popitem(last=False)
        named = self._named
        if span_id and not parent_run_id:
            known = named.get(trace_id)
            if conversation_id or known is None or not known[0]:
                named[trace_id] = (conversation_id or "", span_id)
                named.move_to_end(trace_id)
                while len(named) > self.config.max_conversations:
                    named.popitem(last=False)
        if not conversation_id and not parent_run_id and trace_id in named:
            # (a run that names none, the trace's own run ended with the trace: the conversation
            # of its trace, on the agent span that named it when it has no span of its own)
            named_conversation, named_span = named[trace_id]
            conversation_id = named_conversation or None
            span_id = span_id or named_span
        turn = self._turn_of(run)
        child = self._children.pop((trace_id, run_id), None)
        if child is not None:
            turn = child if turn is None else turn.merge(child)
        if turn is None:
            return None
        if parent_run_id:
            key = (trace_id, parent_run_id)
            waiting = self._children.get(key)
            self._children[key] = turn if waiting is None else waiting.merge(turn)
            while len(self._children) > self.config.max_conversations:
                self._children.popitem(last=False)
            return None
        conv = self.book.get(f"c:{conversation_id}" if conversation_id else f"t:{trace_id}", now)
        finding = self._end_turn(conv, turn, conversation_id or "")
        if finding is None:
            return None
        level = conv.levels.get(finding.reason, 0)
        if level >= Level.PARK:
            return None
        conv.levels[finding.reason] = level + 1
        tool = finding.figures.get("requested_tool", "")
        return conversation_detection(finding, Level(level + 1), conv.turns, run, span_id, trace_id=trace_id,
                                      run_id=run_id, tool=tool if isinstance(tool, str) else "")

    def _end_turn(self, conv: _Turns, turn: _Turn, conversation_id: str) -> Finding | None:
        """Add ``turn`` to ``conv`` (module docstring); the loop it completes, if any."""
        conv.turns += 1
        requests = conv.requests
        news = turn.news or (turn.prompt is not None and conv.prompt is not None and turn.prompt != conv.prompt)
        if turn.prompt is not None:
            conv.prompt = turn.prompt
        if news:
            requests.clear()
            conv.said = self._fresh_said()
            conv.levels.clear()
        for request in turn.executed:
            requests.pop(request, None)
        figures: dict[str, Any] = {"conversation_turns": conv.turns, "conversation_id": conversation_id}
        found = self._unexecuted(conv, turn, figures)
        if found is None and self.text is not None and conv.said is not None:
            best = None
            for said in turn.said:
                joined = self.text[0].join(conv.said, said)
                if joined is not None and (best is None or joined[0] > best[0]):
                    best = joined
            if best is not None:
                count, part, digest = best
                conv.said = self._fresh_said()  # (announced: the next level needs as many again)
                what = "said" if part == "text" else "reasoned"
                found = Finding(
                    Reason.TEXT_REPEAT, {"repeats": count, "part": part, **figures},
                    f"the model {what} the same thing {count} times over the turns of this conversation,"
                    " with nothing new reaching it in between", Scope.CONVERSATION, loop=digest)
        return found

    def _unexecuted(self, conv: _Turns, turn: _Turn, figures: dict[str, Any]) -> Finding | None:
        requests = conv.requests
        best: tuple[int, list[Any]] | None = None
        for request, (tool, cause) in turn.left.items():
            entry = requests.get(request)
            if entry is None:
                if len(requests) >= _MAX_REQUESTS:
                    requests.pop(next(iter(requests)))
                entry = requests[request] = [0, tool, cause]
            entry[0] += 1
            entry[2] = cause
            if entry[0] >= self.config.unexecuted_count and (best is None or entry[0] > best[1][0]):
                best = (request, entry)
        if best is None:
            return None
        count, tool, cause = best[1]
        requests.clear()  # (the loop's evidence, announced: the next level needs as many turns again)
        return Finding(
            Reason.UNEXECUTED_REPEAT, {"unexecuted": count, "cause": cause, "requested_tool": tool, **figures},
            f"the model requested the same {tool} call in {count} turns of this conversation and it never"
            f" ran ({cause}), with nothing new reaching it in between",
            Scope.CONVERSATION, loop=best[0])

    def snapshot(self, now: float, conversations: Iterable[str] | None = None) -> dict[str, Any]:
        """What this table remembers, the conversations with their ages (seconds since
        their last turn): to write out (:meth:`restore` in another process). With
        ``conversations`` (conversation ids), only their turns (not the runs of one trace
        joined without a conversation, nor the traces' links to them)."""
        if conversations is not None:
            return {"conversations": self.book.snapshot(now, [f"c:{c}" for c in conversations])}
        return {"conversations": self.book.snapshot(now), "children": list(self._children.items()),
                "named": list(self._named.items()), "ended": list(self._ended)}

    def restore(self, snapshot: dict[str, Any], now: float, replace: bool = False) -> int:
        """Continue what a :meth:`snapshot` remembered (an age in it counts from ``now``);
        the conversations this table already follows are kept (``replace``: replaced).
        Returns how many conversations were continued."""
        restored = self.book.restore(snapshot.get("conversations", ()), now, _Turns, replace)
        for key, turn in snapshot.get("children", ()):
            self._children.setdefault(tuple(key), turn)
        for trace_id, named in snapshot.get("named", ()):
            self._named.setdefault(trace_id, tuple(named))
        for key in snapshot.get("ended", ()):
            self._ended[tuple(key)] = None
        return restored

    def evict_idle(self, now: float) -> int:
        """Forget the conversations whose last turn ended ``conversation_ttl_seconds`` ago;
        returns how many."""
        return self.book.evict_idle(now)
