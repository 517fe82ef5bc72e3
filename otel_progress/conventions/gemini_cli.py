"""Gemini CLI's own spans (``telemetry.traces`` / ``GEMINI_TELEMETRY_TRACES_ENABLED``).

Read from ``google-gemini/gemini-cli`` ``packages/core/src/telemetry/trace.ts``
(``runInDevTraceSpan``, ``truncateForTelemetry``) and ``scheduler/tool-executor.ts``, and
checked against what ``gemini`` 0.61.0 exports
(``tests/coding_agents/golden/gemini-cli-*.traces.jsonl``). Each tool call is a trace of
its own: ``schedule_tool_calls`` → ``tool_call`` with ``gen_ai.operation.name = tool_call``,
``gen_ai.tool.name``, ``gen_ai.tool.call_id`` and ``gen_ai.conversation.id`` (the session);
with ``logPrompts`` (its default) ``gen_ai.input.messages`` holds the request (JSON: ``name``,
``args``) and ``gen_ai.output.messages`` the completed call (JSON: ``status``, ``response``
with ``responseParts[].functionResponse.response`` (``output`` or ``error``), ``error``,
``errorType`` and ``data.exitCode``). Each value is cut at 10,000 characters and then ends in
``...[TRUNCATED: original length N]``.

What this reads: the arguments, the result (the function response; for a shell command its
``output`` with the ``Process Group PGID`` line, which differs on every call, taken off),
failures (``status = error``, or a nonzero ``exitCode``: the span itself ends OK for both)
and whether the result was cut (then the result is a truncated preview, never proof of an
equal result). The ``tool_call`` spans of one session are one run
(:mod:`.grouping`, :data:`~.grouping.PER_CALL_OPERATIONS`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .base import SpanConvention, ToolContent, as_number, as_text, decode_json, first_text
from .record import SpanKind, SpanRecord

__all__ = ["GeminiCliConvention", "normalise_output"]

OPERATION = "tool_call"
INPUT = "gen_ai.input.messages"
OUTPUT = "gen_ai.output.messages"
TRUNCATED = "...[TRUNCATED: original length "

_VOLATILE_LINE = re.compile(r"(?m)^(?:Process Group PGID|Background PIDs): [0-9, ]*\r?\n?")


def normalise_output(output: str) -> str:
    """A shell output without the lines that differ on every call (process group id,
    background process ids)."""
    if "PGID: " not in output and "Background PIDs: " not in output:
        return output
    return _VOLATILE_LINE.sub("", output)


def _normalise(value: Any) -> Any:
    if isinstance(value, str):
        return normalise_output(value)
    if isinstance(value, Mapping):
        return {k: _normalise(v) for k, v in value.items()}
    return value


def _response(output: Mapping[str, Any]) -> Any:
    """The function response(s) of a completed call (one part: its response alone)."""
    response = output.get("response")
    if not isinstance(response, Mapping):
        return None
    parts = response.get("responseParts")
    found: list[Any] = []
    if isinstance(parts, list):
        for part in parts:
            if isinstance(part, Mapping):
                function = part.get("functionResponse")
                if isinstance(function, Mapping) and "response" in function:
                    found.append(_normalise(function.get("response")))
    if found:
        return found[0] if len(found) == 1 else found
    display = response.get("resultDisplay")
    return _normalise(display) if display is not None else None


def _failure(output: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """``(error type, message)`` of a completed call that failed, else ``(None, None)``."""
    response = output.get("response")
    response = response if isinstance(response, Mapping) else {}
    if output.get("status") == "error":
        error = response.get("error")
        message = as_text(error.get("message")) if isinstance(error, Mapping) else as_text(error)
        return as_text(response.get("errorType")) or "tool_error", message
    data = response.get("data")
    if isinstance(data, Mapping):
        code = as_number(data.get("exitCode"))
        if code is not None and code != 0:
            return "nonzero_exit", None
    return None, None


class GeminiCliConvention(SpanConvention):
    """Gemini CLI's ``tool_call`` spans."""

    name = "gemini-cli"
    marker_keys = frozenset({"gen_ai.tool.call_id"})

    def classify(self, span: SpanRecord) -> SpanKind | None:
        a = span.attributes
        if a.get("gen_ai.operation.name") == OPERATION and "gen_ai.tool.name" in a:
            return SpanKind.TOOL
        return None

    def read_tool(self, span: SpanRecord) -> ToolContent | None:
        a = span.attributes
        if a.get("gen_ai.operation.name") != OPERATION:
            return None
        name = first_text(a, "gen_ai.tool.name")
        arguments = None
        request = decode_json(a.get(INPUT))
        if isinstance(request, Mapping) and "args" in request:
            arguments = request.get("args")
        raw = as_text(a.get(OUTPUT))
        if raw is None:
            return ToolContent(name, arguments, None)
        output = decode_json(raw)
        if isinstance(output, Mapping):
            error_type, message = _failure(output)
            return ToolContent(name, arguments, _response(output), error_type=error_type,
                               error_message=message)
        # cut at 10,000 characters: no longer JSON; keep what there is of the response as a
        # truncated preview (a differing one is still new, an equal one proves nothing)
        at = raw.find('"response":')
        preview = normalise_output(raw[at:] if at >= 0 else raw)
        return ToolContent(name, arguments, preview, truncated=True)
