"""One memory budget for everything the service holds about runs (``--max-state-mib``).

Each holder (the traces, the log runs) estimates what it holds and sets its part; the
total is what the budget bounds and what ``progress.service.state.bytes`` shows. A holder
that adds to the state makes room in its own part (least recently used first) while the
total is over the limit.
"""

from __future__ import annotations

import threading

__all__ = ["StateBudget"]


class StateBudget:
    """Estimated bytes held, by part, against one limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._parts: dict[str, int] = {}
        self._lock = threading.Lock()

    def set(self, part: str, held: int) -> None:
        """What ``part`` holds now (bytes, estimated)."""
        with self._lock:
            self._parts[part] = held

    @property
    def held(self) -> int:
        """Every part's bytes."""
        return sum(self._parts.values())

    def part(self, name: str) -> int:
        return self._parts.get(name, 0)

    def over(self) -> bool:
        """Whether the total is over the limit."""
        return self.held > self.limit
