"""OpenAI Codex CLI's OTLP log events (``[otel] exporter`` in ``config.toml``).

Read from ``openai/codex`` ``codex-rs/otel`` (``tool_result.rs``,
``events/session_telemetry.rs``) and ``codex-rs/core/src/tools`` (``TELEMETRY_PREVIEW_*``,
the unified-exec output format), and checked against what ``codex exec`` 0.171.0 exports
(``tests/coding_agents/golden/codex-*.jsonl``):

- ``codex.tool_result`` (the ``event.name`` attribute; the body is empty and the record's
  OTLP event name is a source location): ``tool_name``, ``call_id``, ``arguments`` (the raw
  argument string the model sent), ``success`` (``"true"``/``"false"``), ``duration_ms``,
  ``output`` (a telemetry preview: at most 2 KiB (the source also says 64 lines; 0.171.0
  sent a 518-line preview), ending in
  ``[... telemetry preview truncated ...]`` when cut; newer builds also say
  ``output_truncated``), ``tool_result_seq``, ``conversation.id``, ``event.timestamp``.
- ``codex.tool_decision`` (logged by the tool's approval step): ``tool_name``, ``call_id``,
  ``decision`` (``approved``, ``approved_for_session``, ``denied``, ``abort``, ...; the
  ``ReviewDecision`` in lower case), ``source`` (``config``, ``user``, ...); no arguments.
  Not read: the approval step runs inside the handler that ``codex.tool_result`` wraps
  (``ToolRegistry::dispatch``, ``log_tool_result_with_tags``), so a refused call has its
  ``tool_result`` too, with ``success = "false"``, its ``arguments``, and as ``output`` the
  refusal the model was given (``exec command rejected by user``, ``patch rejected by
  user``, ``This action was rejected due to unacceptable risk.`` from the guardian
  reviewer, a command followed by ``rejected: policy forbids commands starting with ...`` or
  ``rejected: blocked by policy`` from an exec-policy rule; for ``exec_command`` (unified
  exec) 0.171.0 wraps it: ``exec_command failed: CreateProcess { message: "Rejected(...)" }``,
  and logs no ``tool_decision`` for a command an exec-policy rule forbids). That
  ``tool_result`` is the call, read with ``executed=False`` (it never ran); reading the
  decision too would count one refusal twice.
- ``codex.sse_event`` with ``event.kind = response.completed``: ``input_token_count``,
  ``output_token_count`` (one record per model response carries them).

A shell command's output is an envelope: ``Chunk ID: <random>``, ``Wall time: <s>
seconds``, ``Process exited with code N`` (or ``Process running with session ID N``),
``Original token count: N``, ``Output:`` and the text. The chunk id and the wall time
differ on every call, so they are taken off (identical results give identical strings);
the exit code is kept, and a nonzero exit is a failure although Codex logs
``success="true"`` for it. The output of a process still running (``Process running with
session ID N``, which the model then polls with ``write_stdin``) is given to the engine as
``{"status": "running", "output": ...}``: a poll, an implicit wait, not a loop.
``timeUnixNano`` is 0: records are ordered by ``event.timestamp`` (milliseconds), then by
the observed time.

Evidence: ``full`` when the preview is whole; ``arguments`` (with ``result_truncated``)
when it was cut, so that two outputs equal up to the cut are never taken as the same
result (and ``arguments`` without an output, ``names`` without arguments either). A run is one ``conversation.id``.

Compaction: 0.171.0 logs no event for it (``model_auto_compact_token_limit``, the
``CONTEXT CHECKPOINT COMPACTION`` request, checked by
``tests/coding_agents/test_codex_compaction.py``): only the metric ``codex.task.compact``
counts it, without a ``conversation.id``, and the summariser's request is a
``codex.api_request`` like any other. A Codex compaction is therefore no boundary here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ....model import NOT_CAPTURED, ToolCall
from ...base import as_text, decode_json
from ..base import EVIDENCE_ARGUMENTS, EVIDENCE_FULL, EVIDENCE_NAMES, LogConvention, LogObservation
from ..record import LogRecordView
from .values import as_bool, record_order, text_attribute, to_int

__all__ = ["CodexConvention", "normalise_output", "refused"]

TOOL_RESULT = "codex.tool_result"
SSE_EVENT = "codex.sse_event"
#: The notice Codex appends to a cut telemetry preview (``TELEMETRY_PREVIEW_TRUNCATION_NOTICE``).
PREVIEW_TRUNCATED = "[... telemetry preview truncated ...]"
#: The header of an output Codex itself cut (head and tail kept) before the model saw it.
OUTPUT_TRUNCATED = "Warning: truncated output"

_VOLATILE_LINE = re.compile(r"(?m)^(?:Chunk ID: [0-9A-Za-z]*|Wall time: [0-9.]+ seconds)\r?\n")
_EXIT = re.compile(r"(?m)^Process exited with code (-?\d+)\s*$")
_MAX_SCAN = 64 * 1024
#: What a refused call's ``tool_result`` says (the approval step's error, given to the model).
_REFUSED = frozenset({"exec command rejected by user", "patch rejected by user", "rejected by user"})
_REFUSED_PREFIX = "This action was rejected due to unacceptable risk."
_POLICY_REFUSAL = re.compile(r"^`[^\n]{0,4096}` rejected: (?:policy forbids commands starting with|blocked by policy)")


#: A refusal as unified exec (``exec_command``) reports it: the approval step's error inside
#: the process-creation error (0.171.0: ``exec_command failed: CreateProcess { message:
#: "Rejected(\"`cmd` rejected: policy forbids commands starting with `cat`\")" }``).
_WRAPPED = re.compile(r'^[\w.-]{1,64} failed: CreateProcess \{ message: "Rejected\(\\"(.{1,4096})\\"\)" \}$', re.S)


def refused(output: str | None) -> bool:
    """Whether a failed ``codex.tool_result``'s ``output`` is a refusal: the call never ran."""
    if not output or len(output) > 8192:
        return False
    text = output.strip()
    wrapped = _WRAPPED.match(text)
    if wrapped:
        text = wrapped.group(1).replace('\\"', '"').strip()
    return text in _REFUSED or text.startswith(_REFUSED_PREFIX) or bool(_POLICY_REFUSAL.match(text))


def normalise_output(output: str) -> str:
    """``output`` without the envelope lines that differ on every call (chunk id, wall
    time), so identical results give identical strings."""
    head = output[:512]
    if "Chunk ID: " not in head and "Wall time: " not in head:
        return output
    return _VOLATILE_LINE.sub("", head, count=2) + output[512:]


def _exit_code(output: str) -> int | None:
    """The exit code in a shell output's envelope, if it has one."""
    head = output[:512]
    if "Process exited with code" not in head:
        return None
    match = _EXIT.search(head)
    return int(match.group(1)) if match else None


def _running(output: str) -> bool:
    """Whether a shell output's envelope says the process is still running (Codex returns
    after ``yield_time_ms`` and the model polls it with ``write_stdin``)."""
    head = output[:512]
    return "\nProcess running with session ID " in head or head.startswith("Process running with session ID ")


def _body(output: str) -> str:
    """The command's own text: what follows the envelope's ``Output:`` line."""
    head, sep, rest = output.partition("\nOutput:\n")
    if sep and len(head) < 512:
        return rest
    return output


class CodexConvention(LogConvention):
    """``codex.tool_result`` (tool calls) and ``codex.sse_event`` (tokens)."""

    name = "codex"
    event_names = frozenset({TOOL_RESULT, SSE_EVENT})

    def read(self, record: LogRecordView) -> LogObservation | None:
        attributes = record.attributes
        if not isinstance(attributes, Mapping):
            return None
        conversation = text_attribute(record, "conversation.id")
        if not conversation:
            return None
        run_key = f"codex|{conversation}"
        order = record_order(record)
        event = record.event_name if record.event_name in self.event_names else attributes.get("event.name")
        if event == SSE_EVENT:
            if as_text(attributes.get("event.kind")) != "response.completed":
                return None
            if "input_token_count" not in attributes and "output_token_count" not in attributes:
                return None
            tokens = to_int(attributes.get("input_token_count")) + to_int(attributes.get("output_token_count"))
            return LogObservation("tokens", run_key, order, tokens=tokens, agent="codex",
                                  input_tokens=max(0, to_int(attributes.get("input_token_count"))))
        if event != TOOL_RESULT:
            return None
        return self._tool(record, attributes, run_key, order)

    @staticmethod
    def _tool(record: LogRecordView, a: Mapping[str, Any], run_key: str, order: tuple) -> LogObservation | None:
        name = as_text(a.get("tool_name"))
        if not name:
            return None
        raw_arguments = a.get("arguments")
        arguments: Any = NOT_CAPTURED
        if isinstance(raw_arguments, (str, bytes, bytearray)):
            arguments = decode_json(raw_arguments)
        elif raw_arguments is not None:
            arguments = raw_arguments
        output = as_text(a.get("output"))
        result: Any = NOT_CAPTURED
        truncated = False
        exit_code: int | None = None
        if output is not None:
            truncated = PREVIEW_TRUNCATED in output[-256:] or OUTPUT_TRUNCATED in output[:512]
            exit_code = _exit_code(output)
            result = normalise_output(output[:_MAX_SCAN] if len(output) > _MAX_SCAN else output)
            if exit_code is None and _running(output):
                # still running: a poll, whose status the engine reads as an implicit wait
                result = {"status": "running", "output": _body(result)}
            truncated = truncated or len(output) > _MAX_SCAN
        if as_bool(a.get("output_truncated")):
            truncated = True
        success = as_bool(a.get("success"))
        failed = success is False or (exit_code is not None and exit_code != 0)
        executed = not (success is False and refused(output))  # refused at its approval: never ran
        error_type: str | None = None
        error_message: str | None = None
        if failed:
            error_type = "tool_error" if success is False else "nonzero_exit"
            if output is not None:
                error_message = _body(output)[:4096]
        end_ns = order[0] or record.observed_ns or record.time_ns
        duration_ns = to_int(a.get("duration_ms")) * 1_000_000
        start_ns = max(0, end_ns - duration_ns) if end_ns else 0
        call_id = as_text(a.get("call_id")) or ""
        if output is None:
            evidence = EVIDENCE_NAMES if arguments is NOT_CAPTURED else EVIDENCE_ARGUMENTS
        else:
            evidence = EVIDENCE_ARGUMENTS if truncated else EVIDENCE_FULL
        call = ToolCall(
            name=name,
            arguments=arguments,
            result=result,
            error=failed,
            error_type=error_type,
            error_message=error_message,
            start_ns=start_ns,
            end_ns=end_ns,
            trace_id=record.trace_id,
            span_id=record.span_id or call_id[:64],
            run_id=run_key,
            agent="codex",
            evidence_level=evidence,
            result_truncated=truncated,
            executed=executed,
            call_id=call_id or None,
        )
        return LogObservation("tool", run_key, order, call=call, agent="codex", evidence_level=evidence)
