"""OpenTelemetry GenAI semantic conventions (``gen_ai.*``), the generic convention, asked
last.

* ``execute_tool`` spans: ``gen_ai.tool.name``, ``gen_ai.tool.call.arguments`` /
  ``gen_ai.tool.call.result`` (a JSON string or a map). The newer conventions (semconv
  1.37+, ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``) may instead carry the
  call as message parts, in ``gen_ai.input.messages`` / ``gen_ai.output.messages`` on the
  span or in a ``gen_ai.client.inference.operation.details`` span event: a ``tool_call``
  part (``name``, ``id``, ``arguments``) and a ``tool_call_response`` part (``id``,
  ``response``). The part ``id`` changes every call and is never read.
* ``invoke_agent`` spans (also recognised by the span name ``invoke_agent ...``, for
  frameworks that set ``gen_ai.operation.name`` only after the span started, such as Google
  ADK): ``gen_ai.agent.name``, else ``gen_ai.agent.id``. The 2026 conventions
  (``gen_ai.invocation.internal``, semantic-conventions-genai #571) add two more run roots:
  ``handle_conversation_turn`` (a framework's runner entry point: ADK ``Runner.run``, OpenAI
  Agents ``Runner.run``) and ``invoke_workflow``; their agent is ``gen_ai.agent.name`` (the
  entry-point agent), else ``gen_ai.workflow.name``. :func:`is_nested` reads
  ``gen_ai.invocation.is_nested``.
* 2026 tool-call refinements: a ``gen_ai.tool.call.decision`` (#535; the event, or its
  ``gen_ai.tool.call.decision.outcome`` on the tool span) of ``deny``, or of
  ``require_approval`` with no result, means the call never ran (:func:`tool_decision`,
  ``ToolContent.executed``); a ``gen_ai.execute_tool.command`` span (#574) with a nonzero
  ``process.exit.code`` failed, its error type the exit code (what ``error.type`` SHOULD be).
* ``fetch_response`` spans (#516; a background response polled by its id): a poll, read as a
  call of the tool ``fetch_response`` with the response id as its argument and
  ``{"status": gen_ai.response.status, "id": ...}`` as its result, so that a response still
  ``queued`` / ``in_progress`` is a wait (the implicit wait budget, or a manifest entry for
  ``fetch_response``), never a repeat; its usage is not counted (the operation does no
  inference).
* model spans may carry ``gen_ai.conversation.compacted = true`` (the context is a compacted
  view of the conversation): :func:`is_compacted`.
* model calls (``chat``, ``generate_content``, ``text_completion``, ``embeddings``, or any
  span with usage): ``gen_ai.usage.input_tokens`` + ``output_tokens``, the deprecated
  ``prompt_tokens`` / ``completion_tokens``, else ``gen_ai.usage.total_tokens``.
* model outputs (:meth:`GenAIConvention.read_model_output`): the ``text``, ``reasoning``
  and ``tool_call`` parts of ``gen_ai.output.messages`` (blob, file and uri parts by their
  descriptor; server tool calls, tool results and compaction parts are not read), and the
  latest ``user`` message with text in ``gen_ai.input.messages``: on the span, else in its
  ``gen_ai.client.inference.operation.details`` events (semconv 1.37+, Strands' latest
  conventions); else the older span events ``gen_ai.choice`` (``message``: an OpenAI-style
  ``{"content", "tool_calls"}`` message, or Strands' list of content blocks ``text`` /
  ``toolUse`` / ``reasoningContent``, ``strands/telemetry/tracer.py``
  ``end_model_invoke_span``) and ``gen_ai.user.message`` (``content``).
* call ids, for the replay's causal order where start times tie (JavaScript's millisecond
  clock): a tool span's ``gen_ai.tool.call.id``; a model span's ``tool_call`` parts in
  ``gen_ai.output.messages`` (the calls it requested) and ``tool_call_response`` parts in
  ``gen_ai.input.messages`` (the results it was given), each part's ``id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import (
    COMPACTED_CONTEXT,
    CallLinks,
    ModelOutputContent,
    SpanConvention,
    ToolContent,
    as_number,
    as_text,
    call_ids,
    decode_json,
    event_attributes,
    first_text,
)
from .outputs import OutputParts, cap_text, genai_output, genai_prompt, joined
from .record import SpanKind, SpanRecord

__all__ = [
    "GenAIConvention",
    "choice_message",
    "event_prompt",
    "input_tokens_from",
    "is_compacted",
    "is_nested",
    "message_parts",
    "model_output",
    "tokens_from",
    "tool_decision",
]

OPERATION = "gen_ai.operation.name"
_MODEL_OPS = frozenset({"chat", "generate_content", "text_completion", "embeddings"})
#: Operations of an agent (run-root) span: ``invoke_agent``, and the 2026
#: ``gen_ai.invocation.internal`` operations.
AGENT_OPERATIONS = frozenset({"invoke_agent", "handle_conversation_turn", "invoke_workflow"})
_AGENT_NAME_PREFIXES = tuple(op + " " for op in sorted(AGENT_OPERATIONS))
FETCH_RESPONSE = "fetch_response"
DECISION_EVENT = "gen_ai.tool.call.decision"
DECISION_OUTCOME = "gen_ai.tool.call.decision.outcome"
NESTED = "gen_ai.invocation.is_nested"
COMPACTED = "gen_ai.conversation.compacted"
EXIT_CODE = "process.exit.code"
_USAGE_PAIRS = (
    ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"),
    ("gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"),
)
_DETAILS_EVENT = "gen_ai.client.inference.operation.details"
# Span kinds of other conventions: a span that has one is classified by them, not by its name.
_OTHER_KINDS = frozenset({"openinference.span.kind", "traceloop.span.kind", "mcp.method.name"})
_INPUT_MESSAGES = "gen_ai.input.messages"
_OUTPUT_MESSAGES = "gen_ai.output.messages"
# The message parts that request a tool call and that give its result (their ``id``).
_CALL_PARTS = frozenset({"tool_call"})
_RESPONSE_PARTS = frozenset({"tool_call_response"})


#: Token counts above this are not believed (a corrupt or hostile value): capped here.
MAX_TOKENS = 2**53


def tokens_from(a: Mapping[str, Any], pairs: tuple[tuple[str, str], ...], totals: tuple[str, ...]) -> int | None:
    """Input + output tokens from the first pair of keys present (negative values count 0),
    else the first total; ``None`` when none is present. At most :data:`MAX_TOKENS`."""
    for pair in pairs:
        if pair[0] not in a and pair[1] not in a:  # (the usual case: an absent key reads as None)
            continue
        values = [as_number(a.get(k)) for k in pair]
        if any(v is not None for v in values):
            return int(min(MAX_TOKENS, sum(min(MAX_TOKENS, v) for v in values if v is not None and v > 0)))
    for key in totals:
        v = as_number(a.get(key))
        if v is not None:
            return int(min(MAX_TOKENS, v)) if v > 0 else 0
    return None


def input_tokens_from(a: Mapping[str, Any], keys: tuple[str, ...], cached: tuple[str, ...] = ()) -> int | None:
    """The input tokens: the first of ``keys`` present (negative values count 0), plus the
    ``cached`` counts a convention reports apart from its input count (Anthropic's cache
    reads and writes); ``None`` when none of ``keys`` is present. At most :data:`MAX_TOKENS`."""
    for key in keys:
        value = as_number(a.get(key))
        if value is not None:
            total = max(0, value) + sum(max(0, v) for v in (as_number(a.get(k)) for k in cached) if v is not None)
            return int(min(MAX_TOKENS, total))
    return None


def message_parts(messages: Any, part_type: str) -> list[Mapping[str, Any]]:
    """The parts of type ``part_type`` in a GenAI messages value (a JSON string or a list
    of ``{"role", "parts": [...]}``)."""
    messages = decode_json(messages)
    found: list[Mapping[str, Any]] = []
    if not isinstance(messages, list):
        return found
    for message in messages[:64]:
        parts = message.get("parts") if isinstance(message, Mapping) else None
        if not isinstance(parts, list):
            continue
        for part in parts[:64]:
            if isinstance(part, Mapping) and part.get("type") == part_type:
                found.append(part)
    return found


def _from_parts(span: SpanRecord) -> ToolContent | None:
    """A tool call recorded as message parts, on the span or in its details events."""
    sources: list[Mapping[str, Any]] = [span.attributes]
    sources.extend(event_attributes(span, _DETAILS_EVENT))
    name = arguments = result = None
    for source in sources:
        if arguments is None and _INPUT_MESSAGES in source:
            for part in message_parts(source.get(_INPUT_MESSAGES), "tool_call"):
                name = name or as_text(part.get("name"))
                if "arguments" in part:
                    arguments = part.get("arguments")
                    break
        if result is None and _OUTPUT_MESSAGES in source:
            for part in message_parts(source.get(_OUTPUT_MESSAGES), "tool_call_response"):
                if "response" in part:
                    result = part.get("response")
                    break
    if name is None and arguments is None and result is None:
        return None
    return ToolContent(name, arguments, result)


_CHOICE_EVENT = "gen_ai.choice"
_USER_EVENT = "gen_ai.user.message"


def choice_message(out: OutputParts, message: Any) -> None:
    """A ``gen_ai.choice`` event's ``message``: an OpenAI-style message, or a list of
    Bedrock/Strands content blocks."""
    message = decode_json(message)
    if isinstance(message, Mapping):
        content = message.get("content")
        if isinstance(content, str):
            out.text(content)
        elif isinstance(content, list):
            _blocks(out, content)
        calls = message.get("tool_calls")
        for call in calls[:64] if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                out.ask(function.get("name"), function.get("arguments"), call.get("id"))
    elif isinstance(message, list):
        _blocks(out, message)
    elif isinstance(message, str):
        out.text(message)


def _blocks(out: OutputParts, blocks: list[Any]) -> None:
    for block in blocks[:64]:
        if not isinstance(block, Mapping):
            continue
        if "text" in block:
            out.text(block.get("text"))
        elif isinstance(block.get("toolUse"), Mapping):
            use = block["toolUse"]
            out.ask(use.get("name"), use.get("input"), use.get("toolUseId"))
        elif isinstance(block.get("reasoningContent"), Mapping):
            reasoning = block["reasoningContent"].get("reasoningText")
            if isinstance(reasoning, Mapping):
                out.thought(reasoning.get("text"))


def event_prompt(content: Any) -> str | None:
    """A ``gen_ai.user.message`` event's ``content``: a text, or a list of content blocks."""
    decoded = decode_json(content)
    if isinstance(decoded, str):
        return cap_text(decoded) if decoded else None
    if isinstance(decoded, list):
        texts = [t for t in (as_text(b.get("text")) for b in decoded[:64] if isinstance(b, Mapping)) if t]
        return cap_text(joined(texts) or "") if texts else None
    return None


def _output_in_events(span: SpanRecord) -> ModelOutputContent | None:
    """The older conventions' span events: ``gen_ai.choice`` and ``gen_ai.user.message``."""
    choices = event_attributes(span, _CHOICE_EVENT)
    users = event_attributes(span, _USER_EVENT)
    if not choices and not users:
        return None
    out = OutputParts()
    for attrs in choices:
        choice_message(out, attrs.get("message", attrs.get("content")))
    prompt = None
    for attrs in reversed(users):
        prompt = event_prompt(attrs.get("content"))
        if prompt:
            break
    content = out.content(requests_known=bool(choices))
    return content._replace(prompt=prompt)


def model_output(span: SpanRecord) -> ModelOutputContent | None:
    """The GenAI output and prompt of a model span: its ``gen_ai.output.messages`` /
    ``gen_ai.input.messages``, on the span or in its details events, else the older
    ``gen_ai.choice`` / ``gen_ai.user.message`` events."""
    a = span.attributes
    output = genai_output(a.get(_OUTPUT_MESSAGES)) if _OUTPUT_MESSAGES in a else None
    prompt = genai_prompt(a.get(_INPUT_MESSAGES)) if _INPUT_MESSAGES in a else None
    if span.events and (output is None or prompt is None):
        for attrs in event_attributes(span, _DETAILS_EVENT):
            if output is None and _OUTPUT_MESSAGES in attrs:
                output = genai_output(attrs.get(_OUTPUT_MESSAGES))
            if prompt is None and _INPUT_MESSAGES in attrs:
                prompt = genai_prompt(attrs.get(_INPUT_MESSAGES))
        if output is None:
            older = _output_in_events(span)
            if older is not None:
                output, prompt = older, prompt or older.prompt
    if output is None:
        return ModelOutputContent(prompt=prompt) if prompt is not None else None
    return output._replace(prompt=prompt)


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    text = as_text(value)
    if text is not None and text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    return None


def is_nested(span: SpanRecord) -> bool | None:
    """``gen_ai.invocation.is_nested`` of an invocation span: ``False`` for the one
    top-level invocation of a conversation turn, ``True`` for one inside another (an agent
    handed off to, an agent run as a tool); ``None`` when not set."""
    return _flag(span.attributes.get(NESTED))


def is_compacted(span: SpanRecord) -> bool:
    """Whether the span says its conversation context is a compacted view of the earlier
    conversation (``gen_ai.conversation.compacted = true``; the conventions never set it
    ``false``): the boundary a compaction-aware reader of the run starts from."""
    return _flag(span.attributes.get(COMPACTED)) is True


def tool_decision(span: SpanRecord) -> str | None:
    """The pre-execution decision on a tool span (``allow``, ``deny``,
    ``require_approval``): ``gen_ai.tool.call.decision.outcome`` on the span, else the last
    ``gen_ai.tool.call.decision`` event's; ``None`` when there is none."""
    outcome = as_text(span.attributes.get(DECISION_OUTCOME))
    if outcome:
        return outcome.strip().lower()
    if not span.events:
        return None
    for attrs in reversed(event_attributes(span, DECISION_EVENT)):
        outcome = as_text(attrs.get(DECISION_OUTCOME))
        if outcome:
            return outcome.strip().lower()
    return None


def ran(span: SpanRecord, result: Any) -> bool:
    """Whether a tool span's call ran: not when it was denied, nor when it awaits approval
    and has no result."""
    outcome = tool_decision(span)
    return not (outcome == "deny" or (outcome == "require_approval" and result is None))


def _exit_failure(a: Mapping[str, Any]) -> str | None:
    """The error type of a command that exited nonzero (``process.exit.code``): the exit
    code's text, as the conventions want ``error.type``; ``None`` for 0 or no code."""
    code = as_number(a.get(EXIT_CODE))
    if code is None or code == 0 or code != int(code):
        return None
    return str(int(code))


def _fetch(span: SpanRecord) -> ToolContent:
    """A ``fetch_response`` span as a poll: the response id asked for, the status seen."""
    a = span.attributes
    response = first_text(a, "gen_ai.response.id")
    status = first_text(a, "gen_ai.response.status")
    arguments = {"response_id": response} if response else None
    result = {"status": status, "id": response} if status else None
    return ToolContent(FETCH_RESPONSE, arguments, result)


class GenAIConvention(SpanConvention):
    """The OpenTelemetry GenAI semantic conventions."""

    name = "genai"
    marker_keys = frozenset({OPERATION, *(k for pair in _USAGE_PAIRS for k in pair)})
    marker_name_prefixes = ("execute_tool ", "invoke_agent")
    marker_bytes = (b"gen_ai.", b"execute_tool ", b"invoke_agent")

    def classify(self, span: SpanRecord) -> SpanKind | None:
        a = span.attributes
        op = a.get(OPERATION)
        if isinstance(op, str):
            if op == "execute_tool" or op == FETCH_RESPONSE:
                return SpanKind.TOOL
            if op in AGENT_OPERATIONS:
                return SpanKind.AGENT
            if op in _MODEL_OPS:
                return SpanKind.MODEL
        name = span.name
        if isinstance(name, str) and op is None and _OTHER_KINDS.isdisjoint(a):
            if name.startswith("execute_tool "):
                return SpanKind.TOOL
            if name == "invoke_agent" or name.startswith("invoke_agent "):
                return SpanKind.AGENT
        if "gen_ai.usage.input_tokens" in a or "gen_ai.usage.prompt_tokens" in a:
            return SpanKind.MODEL
        return None

    def read_tool(self, span: SpanRecord) -> ToolContent | None:
        a = span.attributes
        if a.get(OPERATION) == FETCH_RESPONSE:
            return _fetch(span)
        name = first_text(a, "gen_ai.tool.name")
        if name is None and isinstance(span.name, str) and span.name.startswith("execute_tool "):
            name = span.name[len("execute_tool "):] or None
        arguments = a.get("gen_ai.tool.call.arguments")
        result = a.get("gen_ai.tool.call.result")
        if arguments is None or result is None:
            parts = _from_parts(span)
            if parts is not None:
                name = name or parts.name
                arguments = parts.arguments if arguments is None else arguments
                result = parts.result if result is None else result
        exit_error = _exit_failure(a) if EXIT_CODE in a else None
        return ToolContent(name, arguments, result, error_type=exit_error)

    def read_tokens(self, span: SpanRecord) -> int | None:
        return tokens_from(span.attributes, _USAGE_PAIRS, ("gen_ai.usage.total_tokens",))

    def read_input_tokens(self, span: SpanRecord) -> int | None:
        # (gen_ai.usage.input_tokens counts cached input tokens too, by the conventions)
        return input_tokens_from(span.attributes, tuple(pair[0] for pair in _USAGE_PAIRS))

    def agent_name(self, span: SpanRecord) -> str | None:
        name = first_text(span.attributes, "gen_ai.agent.name", "gen_ai.agent.id", "gen_ai.workflow.name")
        if name:
            return name
        span_name = span.name
        if isinstance(span_name, str) and span_name.startswith(_AGENT_NAME_PREFIXES):
            return span_name.partition(" ")[2] or None
        return None

    def read_compaction(self, span: SpanRecord) -> str | None:
        return COMPACTED_CONTEXT if is_compacted(span) else None

    def read_model_output(self, span: SpanRecord) -> ModelOutputContent | None:
        return model_output(span)

    def read_call_links(self, span: SpanRecord) -> CallLinks | None:
        a = span.attributes
        own = first_text(a, "gen_ai.tool.call.id")
        if own is not None:
            return CallLinks(own=own)
        if _INPUT_MESSAGES not in a and _OUTPUT_MESSAGES not in a:
            return None
        return CallLinks(produced=call_ids(a.get(_OUTPUT_MESSAGES), "id", _CALL_PARTS),
                         seen=call_ids(a.get(_INPUT_MESSAGES), "id", _RESPONSE_PARTS))
