"""Claude Code's beta traces (``CLAUDE_CODE_ENHANCED_TELEMETRY_BETA=1``,
``OTEL_TRACES_EXPORTER=otlp``), in every shape Claude Code has shipped since it had them
(captured by ``tests/coding_agents/test_claude_code_cli.py`` from 2.1.332 and 2.1.197; the
older shapes read from the npm packages' ``cli.js`` and native binaries).

A tool call is a ``claude_code.tool`` span (``span.type = tool``, ``tool_name``) under the
``claude_code.interaction`` span (``span.type = interaction``); a model call is a
``claude_code.llm_request`` span (``span.type = llm_request``, ``input_tokens`` /
``output_tokens``). The shapes by version:

* 2.0.x (beta tracing from about 2.0.25) to 2.1.292: no ``gen_ai.operation.name`` and no
  ``gen_ai.tool.name`` on these spans (2.1.1xx adds ``gen_ai.system`` /
  ``gen_ai.request.model`` to ``llm_request``, 2.1.145 ``agent_id`` to ``tool``): this
  module classifies them by ``span.type`` and the span name, and reads the tool name from
  ``tool_name`` and the tokens from ``input_tokens`` + ``output_tokens``.
* about 2.1.300 on (2.1.304 has it, 2.1.292 not): ``gen_ai.operation.name`` =
  ``execute_tool`` / ``invoke_agent`` / ``chat``, ``gen_ai.tool.name``, ``gen_ai.usage.*``,
  read by :mod:`.genai` first.
* before 2.1.101 the ``tool.output`` event is sent with the beta traces alone; from
  2.1.101 only with ``OTEL_LOG_TOOL_CONTENT=1`` (changelog: "beta tracing honors
  OTEL_LOG_USER_PROMPTS, OTEL_LOG_TOOL_DETAILS, and OTEL_LOG_TOOL_CONTENT").

Its content is Claude Code's own: with ``OTEL_LOG_TOOL_CONTENT=1`` a
``tool.output`` span event holds the call's input fields (``bash_command``, ``file_path``,
...) beside its output (``output`` for Bash, ``content`` for Read, ...); with
``OTEL_LOG_TOOL_DETAILS=1`` the span itself has ``full_command`` (Bash) or ``file_path``.
This module reads those: the event's fields other than the output are the arguments, the
output is the result. Without either setting the span has the tool's name only.

Claude Code cuts each content attribute at 60 KB; an output that long is read as a
truncated preview (``ToolContent.truncated``: never proof of an equal result).

Failures are not on this span (it always ends UNSET) but on its ``claude_code.tool.execution``
child; a failed call therefore reads as a call whose result is its error output.

A compaction (2.1.332) is the summariser's own ``claude_code.llm_request`` span,
``query_source_safe = compact`` (:meth:`ClaudeCodeConvention.read_compaction`); the
``claude_code.compaction`` span in the code is switched off in that build, and 2.1.197's
spans carry no query source (its compactions are in the logs only).
"""

from __future__ import annotations

from typing import Any

from .base import COMPACTION, SpanConvention, ToolContent, event_attributes, first_text
from .genai import input_tokens_from, tokens_from
from .record import SpanKind, SpanRecord

__all__ = ["ClaudeCodeConvention"]

_EVENT = "tool.output"
#: The ``tool.output`` fields that hold the call's output, not its input.
_OUTPUT_KEYS = ("output", "content", "stdout", "stderr", "result", "response")
#: Span attributes that name the call's input when there is no ``tool.output`` event.
_INPUT_KEYS = (("full_command", "command"), ("file_path", "file_path"))
#: Claude Code's cut of a content attribute (60 KB); a value this long may have been cut.
_CUT_CHARS = 60 * 1000


_PREFIX = "claude_code."
_KINDS = {("claude_code.tool", "tool"): SpanKind.TOOL, ("claude_code.interaction", "interaction"): SpanKind.AGENT,
          ("claude_code.llm_request", "llm_request"): SpanKind.MODEL}
_TOKENS = (("input_tokens", "output_tokens"),)
_CACHED = ("cache_read_tokens", "cache_creation_tokens")  # input read from and written to the cache


class ClaudeCodeConvention(SpanConvention):
    """Claude Code's ``claude_code.tool``, ``claude_code.interaction`` and
    ``claude_code.llm_request`` spans, with or without the GenAI keys."""

    name = "claude-code"
    marker_name_prefixes = (_PREFIX,)
    marker_bytes = (b"claude_code.",)

    def classify(self, span: SpanRecord) -> SpanKind | None:
        name = span.name
        if not isinstance(name, str) or not name.startswith(_PREFIX):
            return None
        kind = span.attributes.get("span.type")
        return _KINDS.get((name, kind)) if isinstance(kind, str) else None

    def read_tokens(self, span: SpanRecord) -> int | None:
        if span.name != "claude_code.llm_request" or span.attributes.get("span.type") != "llm_request":
            return None
        return tokens_from(span.attributes, _TOKENS, ())

    def read_input_tokens(self, span: SpanRecord) -> int | None:
        if span.name != "claude_code.llm_request" or span.attributes.get("span.type") != "llm_request":
            return None
        # (Anthropic's input_tokens leaves out the cached part of the context: added back)
        return input_tokens_from(span.attributes, ("input_tokens",), _CACHED)

    def read_compaction(self, span: SpanRecord) -> str | None:
        a = span.attributes
        if span.name != "claude_code.llm_request" or a.get("span.type") != "llm_request":
            return None
        if first_text(a, "query_source_safe", "query_source") != "compact" or a.get("success") is False:
            return None
        return COMPACTION

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
