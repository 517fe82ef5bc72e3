"""``first_repeat_turn``: the turn at which a sequence of calls is first seen repeating."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from ..evidence.canonical import Digester, canonical_json
from .signals.repeat import find_period

__all__ = ["first_repeat_turn"]

_digester = Digester()


def _key(name: str, args: Any, result: Any) -> int:
    return _digester.text(f"{name}\x1f{canonical_json(args)}\x1f{canonical_json(result)}")


def first_repeat_turn(calls: Iterable[tuple[str, Any, Any]], window: int) -> int | None:
    """The first 1-based turn at which the last 2p turns are one block of p turns played
    twice, for some 1 <= p <= window // 2, or None if that never happens.

    ``calls`` holds one ``(name, args, result)`` per turn, oldest first; arguments may be
    a map or a JSON string (key order and spacing never matter). The result is part of
    each turn's key, so the same call with a different result is progress. Only the last
    ``window`` keys are kept.
    """
    if window < 2:
        return None
    recent: deque[int] = deque(maxlen=window)
    for turn, (name, args, result) in enumerate(calls, 1):
        recent.append(_key(str(name), args, result))
        if len(recent) >= 2 and find_period(list(recent)) is not None:
            return turn
    return None
