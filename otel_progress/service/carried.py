"""What ``serve`` carries to another process, and how it is read back: the pieces the
checkpoints (:mod:`.checkpoints`) and the hand-off store (:mod:`.state`) share.

A carried trace is a :class:`~otel_progress.runs.carry.TraceBundle`, a carried grouped run
or log run a :class:`~otel_progress.runs.carry.RunBundle`; each has a key (:func:`store_key`)
and lives in a trace table (traces, grouped runs) or in the logs detector (log runs):
:func:`export_state` takes one out, :func:`continue_state` puts one in. :class:`StateIO`
writes and reads them with the engine's codec, and turns what cannot be read into a
warning and a counter, never a failure.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from ..conventions.grouping import is_group_key
from ..engine.snapshot import StateCodec, StateError
from ..runs.carry import (
    CONVERSATION_KEY,
    ConversationBundle,
    RunBundle,
    TraceBundle,
    export_group,
    export_trace,
    import_group,
    import_trace,
)
from .logs import LOG_RUN_KEY, LogsDetector
from .metrics import ServiceMetrics

if TYPE_CHECKING:
    from ..runs.traces import TraceTable

__all__ = ["CONVERSATION_KEY", "Carried", "StateIO", "continue_state", "export_state", "store_key"]
#: A carried trace, run or conversation.
Carried = TraceBundle | RunBundle | ConversationBundle

_log = logging.getLogger("otel_progress.service")


def store_key(bundle: Carried) -> str:
    """The key of a carried trace, run or conversation (in the store, and in a replica's
    generations): a trace's id, a grouped run's group key (``group:...``),
    :data:`~.logs.LOG_RUN_KEY` and a log run's run key, :data:`CONVERSATION_KEY` and a
    conversation's id."""
    if isinstance(bundle, TraceBundle):
        return bundle.trace_id
    if isinstance(bundle, ConversationBundle):
        return CONVERSATION_KEY + bundle.conversation
    return LOG_RUN_KEY + bundle.key if bundle.kind == "log" else bundle.key


def export_state(target: TraceTable | LogsDetector, key: str, now: float, held_limit: int) -> Carried | None:
    """The bundle of the trace, run or conversation ``key`` (:func:`store_key`) open in
    ``target`` (a trace's held spans with it while they weigh at most ``held_limit``
    bytes); None: not open there."""
    if isinstance(target, LogsDetector):
        return target.export_run(key[len(LOG_RUN_KEY):], now) if key.startswith(LOG_RUN_KEY) else None
    if key.startswith(CONVERSATION_KEY):
        conversation = key[len(CONVERSATION_KEY):]
        state = target.engine.conversation_state(now, [conversation])
        if not any(state.get("conversations") or ()) and not (state.get("model_turns") or {}).get("conversations"):
            return None
        return ConversationBundle(conversation, state)
    if is_group_key(key):
        return export_group(target, key, now)
    return export_trace(target, key, now, held_limit)


def continue_state(target: TraceTable | LogsDetector, bundle: Carried, now: float) -> None:
    """Continue a carried trace, run or conversation in ``target`` (a trace table, or the
    logs detector for log runs), replacing what it held of it; raises ``ValueError`` for a
    bundle that does not belong there."""
    logs = isinstance(target, LogsDetector)
    if isinstance(bundle, ConversationBundle) and not logs:
        target.engine.adopt_conversations(bundle.state, 0.0, now, replace=True)
    elif isinstance(bundle, RunBundle) and bundle.kind == "log" and logs:
        target.import_run(bundle, now)
    elif isinstance(bundle, RunBundle) and bundle.kind == "group" and not logs:
        import_group(target, bundle, now)
    elif isinstance(bundle, TraceBundle) and not logs:
        import_trace(target, bundle, now)
    else:
        raise ValueError(f"a {type(bundle).__name__} of kind {getattr(bundle, 'kind', 'trace')!r} does not belong here")


class StateIO:
    """Writes and reads carried state with the engine's codec; what cannot be read is a
    warning (at most once per ``every`` seconds per kind) and
    ``progress.service.state.ignored``."""

    def __init__(self, codec: StateCodec, metrics: ServiceMetrics, every: float = 30.0) -> None:
        self.codec = codec
        self.metrics = metrics
        self.every = every
        self._last: dict[str, float] = {}

    def warn(self, key: str, message: str, *args: Any) -> None:
        """Log a warning, at most once per ``every`` seconds per ``key``."""
        now = time.monotonic()
        if now - self._last.get(key, -1e9) >= self.every:
            self._last[key] = now
            _log.warning(message, *args)

    def dumps(self, obj: Any) -> bytes:
        """``obj`` written (raises :class:`~otel_progress.engine.snapshot.StateError`)."""
        return self.codec.dumps(obj)

    def decode(self, data: Any, what: str) -> Any:
        """``data`` read back, or None (a warning: ``what`` is corrupt or foreign)."""
        try:
            return self.codec.loads(data)
        except StateError as exc:
            self.foreign("checkpoint" if what.startswith("checkpoint") else "store",
                         f"{what} is ignored ({type(exc).__name__}: {exc}); starting empty")
            return None

    def foreign(self, source: str, message: str) -> None:
        """State from ``source`` (``checkpoint``, ``store``) that is not used: counted, warned."""
        self.metrics.add("progress.service.state.ignored", 1, {"source": source})
        self.warn(f"foreign:{source}", "otel-progress: %s", message)
