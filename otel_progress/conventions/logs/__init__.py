"""OpenTelemetry log input: coding agents that export log events instead of tool spans.

Claude Code, Codex CLI, Gemini CLI and Qwen Code export their tool calls as OTLP log
records (``claude_code.tool_result``, ``codex.tool_result``, ``gemini_cli.tool_call``,
``qwen-code.tool_call``, ...). Each agent's events are read by one module under
:mod:`otel_progress.conventions.logs.agents`, a :class:`LogConvention` (see :mod:`.base`), listed in
:data:`LOG_CONVENTIONS`; :func:`read_log` dispatches a
:class:`~otel_progress.conventions.logs.record.LogRecordView` to the convention that reads its event
name. Adding an agent is one module and one line in :data:`LOG_CONVENTIONS`.

Everything here is total: a convention that raises on an odd record is treated as not
having read it.

The pipeline around the readers: :mod:`otel_progress.otlp.logs_json` (OTLP/JSON logs to views) and
:mod:`otel_progress.otlp.logs_proto` (protobuf, for the service), :mod:`otel_progress.runs.logruns` (runs, order, the
engine; shared by ``scan`` and ``serve``), and the service's annotation in
:mod:`otel_progress.service.logs`. See docs/logs.md.
"""

from __future__ import annotations

from collections.abc import Mapping

from .agents.claude_code import ClaudeCodeLogs
from .agents.codex import CodexConvention
from .agents.gemini_cli import GeminiCliConvention
from .agents.qwen_code import QwenCodeLogs
from .base import (
    EVIDENCE_ARGUMENTS,
    EVIDENCE_FULL,
    EVIDENCE_NAMES,
    LogConvention,
    LogObservation,
)
from .record import LogRecordView

__all__ = [
    "EVIDENCE_ARGUMENTS",
    "EVIDENCE_FULL",
    "EVIDENCE_NAMES",
    "LOG_CONVENTIONS",
    "LogConvention",
    "LogObservation",
    "LogRecordView",
    "event_names",
    "read_log",
]

#: The log conventions, one per agent (each module under ``otel_progress.conventions.logs.agents``).
LOG_CONVENTIONS: tuple[LogConvention, ...] = (
    ClaudeCodeLogs(),
    CodexConvention(),
    GeminiCliConvention(),
    QwenCodeLogs(),
)


def _dispatch() -> dict[str, tuple[LogConvention, ...]]:
    table: dict[str, list[LogConvention]] = {}
    for convention in LOG_CONVENTIONS:
        for name in convention.event_names:
            table.setdefault(name, []).append(convention)
    return {name: tuple(readers) for name, readers in table.items()}


_BY_EVENT = _dispatch()


def event_names() -> frozenset[str]:
    """Every event name some convention reads (for a cheap check before decoding)."""
    return frozenset(_BY_EVENT)


def read_log(record: LogRecordView) -> LogObservation | None:
    """The observation in ``record`` from the first convention that reads it, or ``None``.
    A record whose ``event_name`` no convention reads is tried under its ``event.name``
    attribute (an adapter that took a producer's odd OTLP event name loses nothing)."""
    readers = _BY_EVENT.get(record.event_name)
    if readers is None:
        attributes = record.attributes
        name = attributes.get("event.name") if isinstance(attributes, Mapping) else None
        readers = _BY_EVENT.get(name, ()) if isinstance(name, str) else ()
    for convention in readers:
        try:
            observation = convention.read(record)
        except Exception:  # a reader must be total; one that is not is skipped for this record
            continue
        if observation is not None:
            return observation
    return None
