"""The run-time warning when tool spans keep arriving without content.

Without arguments or results on the tool spans, otel-progress can only count recurring
errors (names alone are never compared), and most set-ups that fail, fail silently.
:class:`ContentWatch` logs ONE warning (logger ``otel_progress``, level WARNING) when the
first :data:`WARN_AFTER` tool spans all arrived without content, naming the
instrumentation that made them and the setting to change, from the table in
:mod:`otel_progress.content_settings` (the one ``otel-progress doctor`` reports).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["WARN_AFTER", "ContentWatch"]

#: Tool spans in a row without content, none with content before them, before the warning.
WARN_AFTER = 10

_log = logging.getLogger("otel_progress")


def _advice(attributes: Mapping[str, Any], scope: str) -> str:
    try:
        from ..content_settings import advice_for_span

        return advice_for_span(attributes, os.environ, scope)
    except Exception:  # (the table is another module's: never let it break the processor)
        return "enable the instrumentation's content capture"


class ContentWatch:
    """Counts tool spans without content until the first one with content (or the
    warning). After that, one flag check per tool span."""

    def __init__(self, warn_after: int = WARN_AFTER) -> None:
        self.done = False
        self.warned = False
        self._without = 0
        self._warn_after = max(1, warn_after)
        self._lock = threading.Lock()

    def seen(self, captured: bool, attributes: Mapping[str, Any], scope: str = "") -> None:
        """A tool span was read: ``captured`` says whether it carried content;
        ``scope``: its instrumentation scope name."""
        if self.done:
            return
        if captured:
            self.done = True
            return
        with self._lock:
            if self.done:
                return
            self._without += 1
            if self._without < self._warn_after:
                return
            self.done = self.warned = True
        _log.warning(
            "otel-progress: the first %d tool spans carried no arguments or results, so loops cannot be"
            " detected (only recurring errors). %s. `otel-progress doctor` shows the settings in effect."
            " (Logged once.)", self._without, _advice(attributes, scope))
