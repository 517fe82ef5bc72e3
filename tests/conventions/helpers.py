"""Span records for the convention tests."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from otel_progress.conventions.spans import SpanRecord

_ids = itertools.count(1)
#: Every record built by the current test (``conftest.py`` reads each back from OTLP/JSON).
BUILT: list[SpanRecord] = []


def record(name: str, attributes: Mapping[str, Any], *, events: Sequence[tuple[str, Mapping[str, Any]]] = (),
           parent: str = "", trace: str = "t" * 32, resource: Mapping[str, Any] | None = None,
           error: bool = False) -> SpanRecord:
    n = next(_ids)
    built = SpanRecord(trace, f"{n:016x}", parent, name, n * 1000, n * 1000 + 500, dict(attributes), error, "",
                       tuple(events), dict(resource or {}))
    BUILT.append(built)
    return built
