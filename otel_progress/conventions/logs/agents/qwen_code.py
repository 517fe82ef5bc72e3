"""Qwen Code's OTLP log events (``telemetry.enabled`` / ``QWEN_TELEMETRY_ENABLED``).

Read from QwenLM/qwen-code ``packages/core/src/telemetry/{loggers,types}.ts``
(``logToolCall``, ``ToolCallEvent``) as bundled in ``@qwen-code/qwen-code`` 0.24.4, and
from what that CLI emits (``tests/coding_agents/test_qwen_code_cli.py``):

* ``qwen-code.tool_call`` (attribute ``event.name``): ``function_name``, ``function_args``
  (the whole arguments, JSON text, sent by default), ``status`` (``success``/``error``/
  ``cancelled``), ``success``, ``error`` (the message; for a shell command it includes the
  command's output), ``error_type`` (``shell_execute_error``, ``edit_no_occurrence_found``,
  ...), ``content_length`` (the result's length: the result itself is not logged),
  ``duration_ms``, ``call_id``, ``prompt_id``, ``session.id``, ``decision`` (from the
  confirmation's outcome, ``getDecisionFromOutcome``: ``accept``, ``auto_accept``,
  ``modify``, ``reject`` for ``cancel``): a ``reject`` call never ran
  (``ToolCall.executed = False``), as in Gemini CLI.
* ``qwen-code.api_response``: ``input_token_count``, ``output_token_count``.
* ``loop_detected``: Qwen Code's own loop check, a verdict (:func:`_loop_detected`).

Run: ``session.id`` + ``prompt_id``; order: the record's time, then arrival (no sequence).
Evidence: level ``arguments`` (the arguments are whole, the result is only a length).
Qwen Code's ``qwen-code.tool`` spans with ``includeSensitiveSpanAttributes`` carry
``gen_ai.tool.call.arguments`` and ``gen_ai.tool.call.result`` and are read, at level
``full``, by the OpenTelemetry GenAI span convention.
"""

from __future__ import annotations

from typing import Any

from ....model import NOT_CAPTURED, ToolCall
from ....model.verdicts import QWEN_CODE, Verdict
from ..base import EVIDENCE_ARGUMENTS, EVIDENCE_NAMES, LogConvention, LogObservation
from ..record import LogRecordView
from .values import as_bool, as_int, parse_json_object

__all__ = ["AGENT", "QwenCodeLogs"]

AGENT = "qwen-code"
_TOOL_CALL = "qwen-code.tool_call"
_API_RESPONSE = "qwen-code.api_response"
#: Qwen Code's own loop check (``LoopDetectedEvent``: ``event.name`` without a prefix).
_LOOP_DETECTED = "loop_detected"


class QwenCodeLogs(LogConvention):
    """Qwen Code's ``qwen-code.tool_call`` and ``qwen-code.api_response`` log events, and its
    loop check's ``loop_detected`` (a verdict, see :func:`_loop_detected`)."""

    name = "qwen_code"
    event_names = frozenset({_TOOL_CALL, _API_RESPONSE, _LOOP_DETECTED})

    def read(self, record: LogRecordView) -> LogObservation | None:
        attrs = record.attributes
        session = attrs.get("session.id")
        if not session:
            return None
        run_key = f"{self.name}|{session}|{attrs.get('prompt_id') or ''}"
        order = (record.time_ns, record.index)
        if record.event_name == _API_RESPONSE:
            tokens = (as_int(attrs.get("input_token_count")) or 0) + (as_int(attrs.get("output_token_count")) or 0)
            return LogObservation("tokens", run_key, order, tokens=max(tokens, 0), agent=AGENT,
                                  input_tokens=max(0, as_int(attrs.get("input_token_count")) or 0))
        if record.event_name == _LOOP_DETECTED:
            return _loop_detected(record, attrs, run_key, order)
        if record.event_name != _TOOL_CALL:
            return None
        name = attrs.get("function_name")
        if type(name) is not str or not name:
            return None
        status = attrs.get("status")
        ok = as_bool(attrs.get("success"))
        failed = status in ("error", "cancelled") or (status is None and ok is False)
        args: Any = parse_json_object(attrs.get("function_args"))
        level = EVIDENCE_ARGUMENTS if args is not None else EVIDENCE_NAMES
        length = as_int(attrs.get("content_length"))
        result: Any = NOT_CAPTURED
        if not failed and length is not None:
            result = f"<{length} chars>"  # a length: a differing one is new, an equal one proves nothing
        message = attrs.get("error") or attrs.get("error.message")
        error_type = attrs.get("error_type") or attrs.get("error.type") or (status if failed else None)
        duration = as_int(attrs.get("duration_ms")) or 0
        end = record.time_ns
        call = ToolCall(
            name=name,
            arguments=args if args is not None else NOT_CAPTURED,
            result=result,
            error=failed,
            error_type=str(error_type) if failed and error_type else None,
            error_message=str(message) if failed and message else None,
            start_ns=max(end - duration * 1_000_000, 0),
            end_ns=end,
            trace_id=record.trace_id,
            span_id=str(attrs.get("call_id") or ""),
            agent=AGENT,
            evidence_level=level,
            result_truncated=result is not NOT_CAPTURED,
            executed=attrs.get("decision") != "reject",  # cancelled at its confirmation: never ran
        )
        return LogObservation("tool", run_key, order, call=call, agent=AGENT, evidence_level=level)


def _loop_detected(record: LogRecordView, attrs: Any, run_key: str, order: tuple) -> LogObservation | None:
    """Qwen Code's ``loop_detected`` record (0.24.4: ``logLoopDetected``; scope and
    ``service.name`` ``qwen-code``, body ``Loop detected. Type: X.``, ``loop_type``
    (``consecutive_identical_tool_calls``, ``global_tool_call_duplicate``,
    ``alternating_tool_call_pattern``, ``shell_command_stagnation``, ``read_file_loop``,
    ``action_stagnation``, ``repetitive_thoughts``, ``chanting_identical_sentences``,
    ``turn_tool_call_cap``, ...), ``prompt_id``): a verdict of the prompt's run (of the
    session's current run without ``prompt_id``), kept as corroboration, never reported."""
    if record.scope != AGENT and record.resource.get("service.name") != AGENT:
        return None
    loop_type = attrs.get("loop_type")
    verdict = Verdict(source=QWEN_CODE, kind=loop_type[:128] if type(loop_type) is str else "",
                      trace_id=run_key, run_id=run_key, span_id=record.span_id, time_ns=record.time_ns)
    return LogObservation("verdict", run_key, order, agent=AGENT, verdict=verdict,
                          session_wide=run_key.endswith("|"))
