"""Gemini CLI's OTLP log events (``telemetry.enabled`` in ``.gemini/settings.json`` or
``GEMINI_TELEMETRY_ENABLED``).

Read from ``google-gemini/gemini-cli`` ``packages/core/src/telemetry/{types,loggers,
constants}.ts`` (``ToolCallEvent``, ``ApiResponseEvent``) and checked against what
``gemini`` 0.61.0 exports (``tests/coding_agents/golden/gemini-cli-*.jsonl``):

- ``gemini_cli.tool_call`` (the ``event.name`` attribute; the body is prose, "Tool call:
  X. Success: true. ..."): ``function_name``, ``function_args`` (JSON; sent while
  ``logPrompts`` is on, its default), ``success`` (a bool), ``error`` / ``error.message``,
  ``error_type`` / ``error.type``, ``prompt_id``, ``content_length`` (the size of the
  result: the result itself is never logged), ``metadata`` (JSON; for a shell command
  ``{"exitCode": N, "isError": ...}``), ``duration_ms``, ``start_time`` / ``end_time``
  (Unix ms, often null), ``session.id``, ``event.timestamp``.
- ``gemini_cli.api_response``: ``input_token_count``, ``output_token_count``,
  ``thoughts_token_count``, ``prompt_id``, ``role`` (``main``: the agent's own request;
  ``utility_router`` and the other ``utility_*`` roles are side requests), and while
  ``logPrompts`` is on ``response_text``: the JSON of the whole response
  (``LoggingContentGenerator._logApiResponse`` in ``loggingContentGenerator.ts``:
  ``{"candidates", "usageMetadata", "responseId", ...}``, a list of such chunks when
  streamed), whose ``candidates[].content.parts[]`` are the model's output: ``text`` (with
  ``thought: true``: reasoning; a streamed text is joined across its chunks) and
  ``functionCall`` (``name``, ``args``, ``id``: a requested tool call). A ``main``
  response's output is the model's side of the step (``LogObservation.output``).
- ``gemini_cli.chat_compression`` (body ``Chat compression (Saved N tokens)``):
  ``tokens_before``, ``tokens_after``, ``session.id``, ``event.timestamp``, and no
  ``prompt_id`` (``makeChatCompressionEvent``; ``ChatCompressionService.compress`` in
  ``packages/core/src/services/chatCompressionService.ts`` logs it when the history was
  compressed, and also, with ``tokens_after`` equal to or above ``tokens_before``, when the
  summary came back empty or larger and the history was kept): a compaction boundary of the
  session's current run when ``tokens_after < tokens_before``, else nothing. The
  summariser's two requests are ``api_response`` tokens of the prompt's run (the second
  one's ``prompt_id`` ends in ``-verify``). Gemini CLI
  compresses only where the history has a user message to split at (a second prompt, e.g.
  of a resumed session), when the last prompt's tokens pass ``compressionThreshold`` (0.5)
  of the model's limit.

- ``loop_detected`` (the ``event.name`` attribute, without the ``gemini_cli.`` prefix; scope
  and ``service.name`` ``gemini-cli``; body ``Loop detected (Strike N: ...). Type: X.``):
  Gemini CLI's own loop check (``LoopDetectedEvent`` in ``telemetry/types.ts``, logged by
  ``LoopDetectionService``): ``loop_type`` (``consecutive_identical_tool_calls`` at the 5th
  identical call in a row, ``chanting_identical_sentences``, ``llm_detected_loop``),
  ``prompt_id``, ``count`` (the strike: 1 recovers, 2 ends the session), and for the LLM
  check ``confirmed_by_model``, ``analysis``, ``confidence``. 0.61.0 sends ``prompt_id``
  empty (the service's ``promptId`` is set after the check: captured by
  ``tests/coding_agents/test_gemini_loop_verdict.py``), so the record names the session only
  and belongs to the session's run seen last (``session_wide``), as a compression does. Read
  as a verdict of that run (:class:`~otel_progress.model.verdicts.Verdict`, source
  ``gemini_cli.loop_detected``): corroboration for a detection of ours, never a report of
  its own.

A shell command that exits nonzero is logged ``success: true``; the exit code in
``metadata`` makes it a failure here. With ``logPrompts`` off ``metadata`` keeps only the
diff-stat keys (``TOOL_CALL_METADATA_SAFE_KEYS`` in ``telemetry/types.ts``): the exit code is
gone, and nothing else in the record tells a nonzero exit from a success (``success`` is the
call's status, ``error`` / ``error_type`` are set only when the command could not run,
``shell_execute_error``; ``content_length`` is the size of a response that names the exit
code). Such a call reads as a success, at level ``names`` (no ``function_args`` either):
only recurring errors are judged there, so a nonzero exit is a failure missed, never a
false detection; the exit code needs ``logPrompts``. A call the user rejected at its
confirmation (``decision = reject``, from ``Cancel``) never ran: ``ToolCall.executed`` is
false. The result is only its size, so the evidence is
``arguments``: a size that differs from the earlier ones proves a new result, equal sizes
never prove the same one (the result is given to the engine as ``{"content_length": N}``,
marked partial). Without ``function_args`` (``logPrompts`` off) the evidence is
``names``: only error recurrence applies. The content is in the ``tool_call`` spans of ``telemetry.traces``
(:mod:`otel_progress.conventions.gemini_cli`). A run is one ``session.id`` and
``prompt_id`` (one user prompt); records are ordered by ``start_time``, else
``event.timestamp``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ....model import NOT_CAPTURED, Compaction, ModelOutput, ToolCall
from ....model.verdicts import GEMINI_CLI, Verdict
from ...base import as_number, as_text, decode_json
from ...outputs import MAX_PARTS, OutputParts, cap_text
from ..base import EVIDENCE_ARGUMENTS, EVIDENCE_NAMES, LogConvention, LogObservation
from ..record import LogRecordView
from .values import as_bool, record_order, text_attribute, to_int

__all__ = ["GeminiCliConvention", "exit_code"]

TOOL_CALL = "gemini_cli.tool_call"
API_RESPONSE = "gemini_cli.api_response"
CHAT_COMPRESSION = "gemini_cli.chat_compression"
#: Gemini CLI's loop check (its ``event.name``: 0.61.0 gives this one no ``gemini_cli.`` prefix).
LOOP_DETECTED = "loop_detected"
_SERVICE = "gemini-cli"
#: The suffix of the prompt id of the compression summariser's second request (a check of
#: its draft, ``promptId: `${promptId}-verify```): its tokens belong to the prompt's run.
_VERIFY = "-verify"


def exit_code(metadata: Any) -> int | None:
    """The ``exitCode`` of a tool call's ``metadata`` (a map or its JSON), if any."""
    decoded = decode_json(metadata) if isinstance(metadata, (str, bytes, bytearray)) else metadata
    if not isinstance(decoded, Mapping):
        return None
    number = as_number(decoded.get("exitCode"))
    if number is None or number != int(number) or abs(number) > 2**31:
        return None
    return int(number)


def _ms_ns(value: Any) -> int:
    number = as_number(value)
    if number is None or number <= 0 or number > 2**44:
        return 0
    return int(number) * 1_000_000


class GeminiCliConvention(LogConvention):
    """``gemini_cli.tool_call`` (tool calls), ``gemini_cli.api_response`` (tokens),
    ``gemini_cli.chat_compression`` (compactions) and ``loop_detected`` (Gemini CLI's own
    loop check: a verdict)."""

    name = "gemini_cli"
    event_names = frozenset({TOOL_CALL, API_RESPONSE, CHAT_COMPRESSION, LOOP_DETECTED, "gemini_cli." + LOOP_DETECTED})

    def read(self, record: LogRecordView) -> LogObservation | None:
        attributes = record.attributes
        if not isinstance(attributes, Mapping):
            return None
        session = text_attribute(record, "session.id")
        if not session:
            return None
        prompt = text_attribute(record, "prompt_id") or ""
        if prompt.endswith(_VERIFY):
            prompt = prompt[:-len(_VERIFY)]  # the compression's check (ChatCompressionService): its prompt's
        run_key = f"gemini_cli|{session}|{prompt}"
        start_ns = _ms_ns(attributes.get("start_time"))
        order = (start_ns, record.observed_ns, record.index) if start_ns else record_order(record)
        event = record.event_name if record.event_name in self.event_names else attributes.get("event.name")
        if event == CHAT_COMPRESSION:
            return _compression(record, attributes, session, order)
        if event in (LOOP_DETECTED, "gemini_cli." + LOOP_DETECTED):
            return _loop_detected(record, attributes, run_key, order)
        if event == API_RESPONSE:
            tokens = (to_int(attributes.get("input_token_count")) + to_int(attributes.get("output_token_count"))
                      + to_int(attributes.get("thoughts_token_count")))
            return LogObservation("tokens", run_key, order, tokens=tokens, agent="gemini-cli",
                                  evidence_level=EVIDENCE_ARGUMENTS,
                                  input_tokens=max(0, to_int(attributes.get("input_token_count"))),
                                  output=_response(record, attributes))
        if event != TOOL_CALL:
            return None
        return self._tool(record, attributes, run_key, order, start_ns)

    @staticmethod
    def _tool(record: LogRecordView, a: Mapping[str, Any], run_key: str, order: tuple,
              start_ns: int) -> LogObservation | None:
        name = as_text(a.get("function_name"))
        if not name:
            return None
        raw = a.get("function_args")
        arguments: Any = NOT_CAPTURED
        if raw is not None:
            arguments = decode_json(raw)
        size = a.get("content_length")
        result: Any = NOT_CAPTURED
        if as_number(size) is not None:
            result = {"content_length": to_int(size)}
        executed = as_text(a.get("decision")) != "reject"  # reject: cancelled at its confirmation, never ran
        success = as_bool(a.get("success"))
        code = exit_code(a.get("metadata"))
        failed = success is False or (code is not None and code != 0)
        error_type: str | None = None
        error_message: str | None = None
        if failed:
            if success is False:
                error_type = as_text(a.get("error_type")) or as_text(a.get("error.type")) or "tool_error"
                error_message = as_text(a.get("error")) or as_text(a.get("error.message"))
            else:
                error_type = "nonzero_exit"  # no message: the engine tells failures apart by request
            if result is not NOT_CAPTURED and code is not None:
                result = {**result, "exit_code": code}
        end_ns = _ms_ns(a.get("end_time")) or order[0]
        if not start_ns:
            start_ns = max(0, end_ns - to_int(a.get("duration_ms")) * 1_000_000) if end_ns else 0
        # without function_args (logPrompts off) only the name and the outcome are known
        evidence = EVIDENCE_NAMES if arguments is NOT_CAPTURED else EVIDENCE_ARGUMENTS
        call = ToolCall(
            name=name,
            arguments=arguments,
            result=result,
            error=failed,
            error_type=error_type,
            error_message=error_message[:4096] if error_message else None,
            start_ns=start_ns,
            end_ns=end_ns,
            trace_id=record.trace_id,
            span_id=record.span_id,
            run_id=run_key,
            agent="gemini-cli",
            evidence_level=evidence,
            result_truncated=False,
            executed=executed,
        )
        return LogObservation("tool", run_key, order, call=call, agent="gemini-cli", evidence_level=evidence)


def _compression(record: LogRecordView, a: Mapping[str, Any], session: str, order: tuple) -> LogObservation:
    """A ``gemini_cli.chat_compression`` record: a boundary of the session's current run
    when the history shrank, else nothing (an empty or larger summary was not applied)."""
    run_key = f"gemini_cli|{session}|"  # the record has no prompt_id: the session's run seen last
    before, after = as_number(a.get("tokens_before")), as_number(a.get("tokens_after"))
    if before is None or after is None or not 0 <= after < before:
        return LogObservation("other", run_key, order, agent="gemini-cli", session_wide=True)
    compaction = Compaction(
        trace_id=record.trace_id,
        time_ns=order[0],
        tokens_before=int(before),
        tokens_after=int(after),
        source=CHAT_COMPRESSION,
        agent="gemini-cli",
    )
    return LogObservation("compaction", run_key, order, agent="gemini-cli", compaction=compaction,
                          session_wide=True)


def _response(record: LogRecordView, a: Mapping[str, Any]) -> ModelOutput | None:
    """The model's output in an ``api_response`` record's ``response_text`` (``None``:
    not logged, not the agent's own request, or nothing in it)."""
    role = a.get("role")
    if role not in (None, "", "main") or "response_text" not in a:
        return None
    decoded = decode_json(a.get("response_text"))
    chunks = decoded if isinstance(decoded, list) else [decoded]
    text: list[str] = []
    thought: list[str] = []
    out = OutputParts()
    for chunk in chunks[-4096:]:
        candidates = chunk.get("candidates") if isinstance(chunk, Mapping) else None
        candidate = candidates[0] if isinstance(candidates, list) and candidates else None
        content = candidate.get("content") if isinstance(candidate, Mapping) else None
        parts = content.get("parts") if isinstance(content, Mapping) else None
        for part in parts[:MAX_PARTS] if isinstance(parts, list) else ():
            if not isinstance(part, Mapping):
                continue
            piece = as_text(part.get("text"))
            if piece:
                (thought if part.get("thought") is True else text).append(piece)
            call = part.get("functionCall")
            if isinstance(call, Mapping):
                out.ask(call.get("name"), call.get("args"), call.get("id"))
    if not text and not thought and not out.requests:
        return None
    time_ns = record.time_ns or record.observed_ns
    return ModelOutput(start_ns=time_ns, end_ns=time_ns, agent="gemini-cli",
                       text=cap_text("".join(text)) if text else None,
                       reasoning=cap_text("".join(thought)) if thought else None, requests=tuple(out.requests))


def _loop_detected(record: LogRecordView, a: Mapping[str, Any], run_key: str, order: tuple) -> LogObservation | None:
    """A ``loop_detected`` record of Gemini CLI's (its scope or service says so: the name
    alone is too plain to be sure): a verdict of the prompt's run."""
    if record.scope != _SERVICE and record.resource.get("service.name") != _SERVICE:
        return None
    session_wide = run_key.endswith("|")  # 0.61.0 sends prompt_id "": the session's current run
    loop_type = as_text(a.get("loop_type")) or ""
    count = as_number(a.get("count"))
    verdict = Verdict(
        source=GEMINI_CLI,
        kind=loop_type[:128],
        trace_id=run_key,
        run_id=run_key,
        span_id=record.span_id,
        time_ns=order[0] if order and isinstance(order[0], int) else record.time_ns,
        count=int(count) if count is not None and count == int(count) and abs(count) < 2**31 else None,
    )
    return LogObservation("verdict", run_key, order, agent="gemini-cli", verdict=verdict, session_wide=session_wide)
