"""Claude Code's beta traces (``CLAUDE_CODE_ENHANCED_TELEMETRY_BETA=1``,
``OTEL_TRACES_EXPORTER=otlp``), as Claude Code 2.1.332 exports them (captured by
``tests/coding_agents/test_claude_code_cli.py``).

A tool call is a ``claude_code.tool`` span (``span.type = tool``) under the
``claude_code.interaction`` span (``gen_ai.operation.name = invoke_agent``); it carries
``gen_ai.operation.name = execute_tool`` and ``gen_ai.tool.name``, so :mod:`.genai`
classifies it. Its content is Claude Code's own: with ``OTEL_LOG_TOOL_CONTENT=1`` a
``tool.output`` span event holds the call's input fields (``bash_command``, ``file_path``,
...) beside its output (``output`` for Bash, ``content`` for Read, ...); with
``OTEL_LOG_TOOL_DETAILS=1`` the span itself has ``full_command`` (Bash) or ``file_path``.
This module reads those: the event's fields other than the output are the arguments, the
output is the result. Without either setting the span has the tool's name only.

Claude Code cuts each content attribute at 60 KB; an output that long is read as a
truncated preview (``ToolContent.truncated``: never proof of an equal result).

Failures are not on this span (it always ends UNSET) but on its ``claude_code.tool.execution``
child; a failed call therefore reads as a call whose result is its error output.
"""

from __future__ import annotations

from typing import Any

from .base import SpanConvention, ToolContent, event_attributes, first_text
from .record import SpanRecord

__all__ = ["ClaudeCodeConvention"]

_EVENT = "tool.output"
#: The ``tool.output`` fields that hold the call's output, not its input.
_OUTPUT_KEYS = ("output", "content", "stdout", "stderr", "result", "response")
#: Span attributes that name the call's input when there is no ``tool.output`` event.
_INPUT_KEYS = (("full_command", "command"), ("file_path", "file_path"))
#: Claude Code's cut of a content attribute (60 KB); a value this long may have been cut.
_CUT_CHARS = 60 * 1000


class ClaudeCodeConvention(SpanConvention):
    """The content of Claude Code's ``claude_code.tool`` spans."""

    name = "claude-code"

    def read_tool(self, span: SpanRecord) -> ToolContent | None:
        a = span.attributes
        if a.get("span.type") != "tool" or span.name != "claude_code.tool":
            return None
        name = first_text(a, "gen_ai.tool.name", "tool_name")
        arguments: Any = None
        result: Any = None
        events = event_attributes(span, _EVENT)
        if events:
            fields = events[-1]
            outputs = [fields[k] for k in _OUTPUT_KEYS if k in fields]
            if outputs:
                result = outputs[0] if len(outputs) == 1 else "\n".join(str(o) for o in outputs)
            arguments = {k: v for k, v in fields.items() if k not in _OUTPUT_KEYS} or None
        if arguments is None:
            found = {key: a[attr] for attr, key in _INPUT_KEYS if isinstance(a.get(attr), str)}
            arguments = found or None
        cut = isinstance(result, str) and len(result) >= _CUT_CHARS
        return ToolContent(name, arguments, result, truncated=cut)
