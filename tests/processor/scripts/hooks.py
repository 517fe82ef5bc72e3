"""A detection hook loaded by name (OTEL_PROGRESS_ON_DETECTION=hooks:print_nudge)."""

from __future__ import annotations

import sys
from typing import Any


def print_nudge(detection: Any) -> None:
    print(f"HOOK level={int(detection.level)} turn={detection.turn} nudge={detection.nudge[:40]!r}",
          file=sys.stderr)
