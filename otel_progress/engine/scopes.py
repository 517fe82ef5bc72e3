"""The engine's memory across traces (:class:`CrossTraceScopes`): the conversation scope's
turns (:mod:`.conversations`) and the model side's (:mod:`.model_turns`), each made only
when its signals are on, fed every run that ends, bounded and written out together.
Not thread-safe: the engine holds its lock."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .conversations import ConversationTable
from .model_turns import ModelTurns
from .signals import ConversationSignal
from .signals.text import TextRepeatSignal

if TYPE_CHECKING:
    from ..model import Detection
    from .config import Config
    from .pipeline import Pipeline
    from .runstate import RunState
    from .tables import TraceState

__all__ = ["CrossTraceScopes"]


class CrossTraceScopes:
    """The conversations the engine follows across traces (module docstring)."""

    def __init__(self, config: Config, pipeline: Pipeline) -> None:
        # The conversation scope: the turns of each conversation (None: its signal is off).
        turn_index = next((i for i, s in enumerate(pipeline.signals) if isinstance(s, ConversationSignal)), None)
        self.conversations = ConversationTable(config, turn_index) if turn_index is not None else None
        # The model side: requests left unexecuted, texts said, turn after turn (None: both off).
        model_signals = pipeline.model_signals
        unexecuted_index = next((i for i, s in enumerate(model_signals) if s.name == "unexecuted"), None)
        text = next(((s, i) for i, s in enumerate(model_signals) if isinstance(s, TextRepeatSignal)), None)
        self.model_turns = ModelTurns(config, unexecuted_index, text) \
            if unexecuted_index is not None or text is not None else None

    def run_ended(self, trace: TraceState, trace_id: str, run_id: str, run: RunState | None,
                  parent_run_id: str | None, conversation_id: str | None, span_id: str, now: float) -> list[Detection]:
        """A run ended (``run``: the engine's state of it, None when it kept none): the
        detections of the turns it completes."""
        out: list[Detection] = []
        if run is not None and self.conversations is not None:
            det = self.conversations.run_ended(trace, run, parent_run_id, conversation_id, span_id, now)
            if det is not None:
                out.append(det)
        if self.model_turns is not None:
            det = self.model_turns.run_ended(trace_id, run_id, run, parent_run_id, conversation_id, span_id, now)
            if det is not None:
                out.append(det)
        return out

    def evict_idle(self, now: float) -> None:
        """Forget the conversations idle for longer than ``conversation_ttl_seconds``."""
        if self.conversations is not None:
            self.conversations.evict_idle(now)
        if self.model_turns is not None:
            self.model_turns.evict_idle(now)

    def snapshot(self, now: float, conversations: Iterable[str] | None = None) -> dict[str, Any]:
        """What both remember (of ``conversations`` only, when given), with ages counted
        from ``now`` (empty when both are off)."""
        out: dict[str, Any] = {}
        if self.conversations is not None:
            out["conversations"] = self.conversations.snapshot(now, conversations)
        if self.model_turns is not None:
            out["model_turns"] = self.model_turns.snapshot(now, conversations)
        return out

    def restore(self, state: Mapping[str, Any], now: float, replace: bool = False) -> int:
        """Continue a :meth:`snapshot` (its ages counted from ``now``; ``replace``: the
        conversations followed here too are replaced); how many were continued."""
        restored = 0
        if self.conversations is not None and isinstance(state.get("conversations"), list):
            restored += self.conversations.restore(state["conversations"], now, replace)
        if self.model_turns is not None and isinstance(state.get("model_turns"), dict):
            restored += self.model_turns.restore(state["model_turns"], now, replace)
        return restored
