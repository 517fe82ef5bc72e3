"""The convention-neutral span record and span kinds (re-exported by
:mod:`otel_progress.conventions.spans`, where users import them)."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["SpanKind", "SpanRecord"]


class SpanKind(enum.Enum):
    """What a span is, for the engine."""

    TOOL = "tool"
    AGENT = "agent"
    MODEL = "model"
    OTHER = "other"


_NO_RESOURCE: Mapping[str, Any] = MappingProxyType({})


def _no_resource() -> Mapping[str, Any]:
    return _NO_RESOURCE


@dataclass(slots=True)
class SpanRecord:
    """A convention-neutral view of one span. Ids are lower-case hex strings.

    ``resource``: the attributes of the resource that produced the span (``service.name``,
    ``service.instance.id``, ``process.pid``, ...), used to group tool calls that have no
    agent span (see :mod:`otel_progress.conventions.grouping`); empty when unknown.
    """

    trace_id: str
    span_id: str
    parent_id: str = ""
    name: str = ""
    start_ns: int = 0
    end_ns: int = 0
    attributes: Mapping[str, Any] = field(default_factory=dict)
    error: bool = False
    status_message: str = ""
    events: Sequence[tuple[str, Mapping[str, Any]]] = ()
    resource: Mapping[str, Any] = field(default_factory=_no_resource)
