"""Claude Code's OTLP log events (``CLAUDE_CODE_ENABLE_TELEMETRY=1``, ``OTEL_LOGS_EXPORTER``).

Read from what the real CLI emits (``@anthropic-ai/claude-code`` 2.1.332, captured by
``tests/coding_agents/test_claude_code_cli.py``) and its monitoring page
(code.claude.com/docs/en/monitoring-usage):

* ``claude_code.tool_result`` (the log body; attribute ``event.name = tool_result``):
  ``tool_name``, ``tool_use_id``, ``success`` (the string ``"true"``/``"false"``),
  ``duration_ms`` (a string), ``error_type`` (``ShellError``, ...), ``tool_input_size_bytes``,
  ``tool_result_size_bytes``; with ``OTEL_LOG_TOOL_DETAILS=1`` also ``tool_input`` (the
  arguments as JSON, each long string value cut to a prefix followed by ``…[N chars]``),
  ``tool_parameters`` (for Bash the whole ``full_command``) and ``error`` (the message).
* ``claude_code.api_request``: ``input_tokens``, ``output_tokens`` (tokens burned). The
  compaction's own summarising request has ``query_source = compact``: its tokens are
  burned too (overhead), and it is never a step.
* ``claude_code.compaction`` (2.1.197 and 2.1.332 both send it): ``trigger`` (``auto`` /
  ``manual``), ``success`` (``"true"``/``"false"``), ``duration_ms``, ``pre_tokens``,
  ``post_tokens`` (strings), ``error`` on failure: a compaction boundary of the run (a
  failed one is not: the context stayed as it was).
* ``claude_code.tool_decision``: the permission decision, ``decision`` (``accept`` /
  ``reject``), ``source`` (``config`` for a settings rule or the permission mode,
  ``user_reject``, ``user_abort``, ``hook``, ...), ``tool_name``, ``tool_use_id``, and with
  ``OTEL_LOG_TOOL_DETAILS=1`` ``tool_parameters`` (for Bash ``full_command``,
  ``description``, ``timeout``). An accepted call is read from its ``tool_result``; a
  **rejected** one never ran and has no ``tool_result`` (2.1.332, a ``permissions.deny``
  rule: only the decision is logged), so the decision is the call: a
  :class:`~otel_progress.model.ToolCall` with ``executed=False``, its arguments rebuilt
  from ``tool_parameters`` for Bash (``command``, ``description``, ``timeout``, the keys of
  its ``tool_input``) and not captured for other tools (whose parameters name only an MCP
  server, a skill or a subagent type).

Every record carries ``session.id``, ``prompt.id`` (one user prompt: the run) and
``event.sequence`` (monotonic per session: the order).

Evidence: the result is never in the logs, only its size. With ``OTEL_LOG_TOOL_DETAILS=1``
a call is at level ``arguments`` (its arguments are known, the result is a size: a
differing size proves a new result, an equal one proves nothing); without it, or when an
argument value was cut (and is not restored from ``full_command``), at level ``names``
(only error recurrence). Claude Code's beta traces with ``OTEL_LOG_TOOL_CONTENT=1`` carry
the output: see :mod:`otel_progress.conventions.claude_code`.
"""

from __future__ import annotations

import re
from typing import Any

from ....model import COMPACTION_AUTO, COMPACTION_MANUAL, NOT_CAPTURED, Compaction, ToolCall
from ..base import EVIDENCE_ARGUMENTS, EVIDENCE_NAMES, LogConvention, LogObservation
from ..record import LogRecordView
from .values import as_bool, as_int, parse_json_object

__all__ = ["AGENT", "ClaudeCodeLogs"]

AGENT = "claude-code"
_SCOPE = "com.anthropic.claude_code.events"
_PREFIX = "claude_code."
_TOOL_RESULT = "tool_result"
_API_REQUEST = "api_request"
_TOOL_DECISION = "tool_decision"
_COMPACTION = "compaction"
_KINDS = (_TOOL_RESULT, _API_REQUEST, _TOOL_DECISION, _COMPACTION)
_TRIGGERS = {"auto": COMPACTION_AUTO, "manual": COMPACTION_MANUAL}
#: How Claude Code marks a string argument it cut: a prefix, then ``…[709 chars]``.
_CUT = re.compile(r"…\[\d+ chars\]$")


def _kind(record: LogRecordView) -> str | None:
    """The event's short name (``tool_result``, ...) when the record is Claude Code's."""
    name = record.event_name
    if name.startswith(_PREFIX):
        return name[len(_PREFIX):]
    body = record.body
    if type(body) is str and body.startswith(_PREFIX):
        return body[len(_PREFIX):]
    if record.scope == _SCOPE or record.resource.get("service.name") == AGENT:
        return name
    return None


def _is_cut(value: Any) -> bool:
    if type(value) is str:
        return bool(_CUT.search(value))
    if type(value) is dict:
        return any(_is_cut(v) for v in value.values())
    if type(value) is list:
        return any(_is_cut(v) for v in value)
    return False


def _arguments(attrs: Any) -> tuple[Any, bool]:
    """The call's arguments and whether they are whole (False: absent, or a value cut)."""
    args = parse_json_object(attrs.get("tool_input"))
    if args is None:
        return NOT_CAPTURED, False
    if type(args.get("command")) is str and _is_cut(args["command"]):
        parameters = parse_json_object(attrs.get("tool_parameters"))
        full = parameters.get("full_command") if parameters else None
        if type(full) is str and full:
            args = {**args, "command": full}  # Bash: the whole command is in tool_parameters
    return args, not _is_cut(args)


class ClaudeCodeLogs(LogConvention):
    """Claude Code's ``claude_code.*`` log events (see the module docstring)."""

    name = "claude_code"
    event_names = frozenset({
        *(_PREFIX + kind for kind in _KINDS),
        *_KINDS,  # as the event.name attribute has them
    })

    def read(self, record: LogRecordView) -> LogObservation | None:
        kind = _kind(record)
        if kind not in _KINDS:
            return None
        attrs = record.attributes
        session = attrs.get("session.id")
        if not session:
            return None
        run_key = f"{self.name}|{session}|{attrs.get('prompt.id') or ''}"
        sequence = as_int(attrs.get("event.sequence"))
        order = (sequence if sequence is not None else -1, record.time_ns, record.index)
        if kind == _API_REQUEST:
            tokens = (as_int(attrs.get("input_tokens")) or 0) + (as_int(attrs.get("output_tokens")) or 0)
            # (input_tokens leaves out the cached part of the context the model read)
            read = sum(max(0, as_int(attrs.get(k)) or 0) for k in ("input_tokens", "cache_read_tokens",
                                                                   "cache_creation_tokens"))
            return LogObservation("tokens", run_key, order, tokens=max(tokens, 0), agent=AGENT, input_tokens=read)
        if kind == _TOOL_DECISION:
            return _decision(record, attrs, run_key, order)
        if kind == _COMPACTION:
            return _compaction(record, attrs, run_key, order)
        name = attrs.get("tool_name")
        if type(name) is not str or not name:
            return None
        ok = as_bool(attrs.get("success"))
        failed = ok is False
        args, whole = _arguments(attrs)
        level = EVIDENCE_ARGUMENTS if whole else EVIDENCE_NAMES
        size = as_int(attrs.get("tool_result_size_bytes"))
        result: Any = NOT_CAPTURED
        if not failed and size is not None:
            result = f"<{size} bytes>"  # a size: a differing one is new, an equal one proves nothing
        message = attrs.get("error")
        duration = as_int(attrs.get("duration_ms")) or 0
        end = record.time_ns
        call = ToolCall(
            name=name,
            arguments=args if whole else NOT_CAPTURED,
            result=result,
            error=failed,
            error_type=str(attrs.get("error_type")) if failed and attrs.get("error_type") else None,
            error_message=str(message) if failed and message else None,
            start_ns=max(end - duration * 1_000_000, 0),
            end_ns=end,
            trace_id=record.trace_id,
            span_id=str(attrs.get("tool_use_id") or ""),
            agent=AGENT,
            evidence_level=level,
            result_truncated=result is not NOT_CAPTURED,
        )
        return LogObservation("tool", run_key, order, call=call, agent=AGENT, evidence_level=level)


def _refused_arguments(attrs: Any) -> Any:
    """A refused Bash call's arguments, rebuilt from ``tool_parameters`` as its
    ``tool_input`` would have had them; :data:`NOT_CAPTURED` otherwise."""
    parameters = parse_json_object(attrs.get("tool_parameters"))
    if not parameters or attrs.get("tool_name") != "Bash":
        return NOT_CAPTURED
    command = parameters.get("full_command")
    if type(command) is not str or not command or _is_cut(command):
        return NOT_CAPTURED
    args: dict[str, Any] = {"command": command}
    for key in ("description", "timeout"):
        if key in parameters and not _is_cut(parameters[key]):
            args[key] = parameters[key]
    return args


def _decision(record: LogRecordView, attrs: Any, run_key: str, order: tuple) -> LogObservation | None:
    """A ``claude_code.tool_decision`` record: a call that never ran when it was rejected,
    else nothing (an accepted call is read from its ``tool_result``)."""
    name = attrs.get("tool_name")
    if attrs.get("decision") != "reject" or type(name) is not str or not name:
        return LogObservation("other", run_key, order, agent=AGENT)
    args = _refused_arguments(attrs)
    level = EVIDENCE_NAMES if args is NOT_CAPTURED else EVIDENCE_ARGUMENTS
    source = attrs.get("source")
    call = ToolCall(
        name=name,
        arguments=args,
        error=True,
        error_type="rejected",
        error_message=f"rejected ({source})" if type(source) is str and source else "rejected",
        start_ns=record.time_ns,
        end_ns=record.time_ns,
        trace_id=record.trace_id,
        span_id=str(attrs.get("tool_use_id") or ""),
        agent=AGENT,
        evidence_level=level,
        executed=False,
        call_id=str(attrs.get("tool_use_id")) if attrs.get("tool_use_id") else None,
    )
    return LogObservation("tool", run_key, order, call=call, agent=AGENT, evidence_level=level)


def _compaction(record: LogRecordView, attrs: Any, run_key: str, order: tuple) -> LogObservation:
    """A ``claude_code.compaction`` record: a boundary when it succeeded, else nothing."""
    if as_bool(attrs.get("success")) is not True:
        return LogObservation("other", run_key, order, agent=AGENT)  # the context stayed as it was
    trigger = attrs.get("trigger")
    compaction = Compaction(
        trace_id=record.trace_id,
        run_id=run_key,
        time_ns=record.time_ns,
        trigger=_TRIGGERS.get(trigger) if type(trigger) is str else None,
        tokens_before=as_int(attrs.get("pre_tokens")),
        tokens_after=as_int(attrs.get("post_tokens")),
        source=_PREFIX + _COMPACTION,
        agent=AGENT,
    )
    return LogObservation("compaction", run_key, order, agent=AGENT, compaction=compaction)
