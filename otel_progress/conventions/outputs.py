"""The model's side of a step, as the conventions read it: helpers shared by the
:meth:`~otel_progress.conventions.base.SpanConvention.read_model_output` readers.

A model span's output is kept small: the engine compares texts by digest and shape, so a
text part longer than :data:`MAX_PART` characters keeps its first :data:`MAX_PART`
characters and a digest of the whole (two long texts that differ after the cut still
differ); a blob part (``blob``, Pydantic AI's ``binary``, a data URL or a base64 payload in
a text) is its descriptor (:mod:`otel_progress.evidence.blobs`: kind and size class, never
the bytes), a ``file`` / ``uri`` part its reference.

The GenAI message shapes (:func:`genai_output`, :func:`genai_prompt`) are those of the
semantic conventions' message models, read in ``opentelemetry-util-genai``
``opentelemetry/util/genai/types.py`` (``TextPart``, ``ReasoningPart``,
``ToolCallRequestPart``, ``ToolCallResponsePart``, ``ServerToolCallPart``,
``ServerToolCallResponsePart``, ``CompactionPart``, ``BlobPart``, ``FilePart``,
``UriPart``; ``InputMessage`` / ``OutputMessage`` = ``{"role", "parts", ...}``), and the
variants the instrumentations write: Pydantic AI's ``thinking``, ``binary`` parts and
``builtin`` tool calls (``pydantic_ai/messages.py``, ``ModelResponse.otel_message_parts``,
``_tool_call_otel_part``, ``_convert_binary_to_otel_part``, read at pydantic-ai-slim 2.68.0).
Everything here is total: a value of the wrong type is not read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..evidence.blobs import describe_text, may_hold_blob
from ..model import NOT_CAPTURED, ToolRequest
from .base import ModelOutputContent, as_text, decode_json

__all__ = [
    "MAX_PART",
    "MAX_PARTS",
    "ModelOutputContent",
    "OutputParts",
    "blob_descriptor",
    "cap_text",
    "genai_output",
    "genai_prompt",
    "joined",
    "latest_user_text",
    "request",
]

#: Characters of one text part kept (the rest is a digest).
MAX_PART = 4096
#: Messages, and parts of a message, read at most.
MAX_PARTS = 64
#: A base64 payload longer than this is described by its length alone (no scan of it).
_MAX_BLOB_SCAN = 16 * 1024 * 1024


def cap_text(text: str) -> str:
    """``text`` with blobs described and cut to :data:`MAX_PART` characters plus a digest
    of the whole (the same text when short and blob-free)."""
    if ";base64," in text or may_hold_blob(text):
        text = describe_text(text)
    if len(text) <= MAX_PART:
        return text
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return f"{text[:MAX_PART]}…<+{len(text) - MAX_PART} chars {digest}>"


def blob_descriptor(mime: Any, content: Any) -> str:
    """The descriptor of an inline blob part: ``<blob image/png ~64KiB>`` (its kind and size
    class, :func:`~otel_progress.evidence.blobs.describe_text` of its data URL), never its
    bytes."""
    kind = as_text(mime) or "binary"
    if isinstance(content, (bytes, bytearray)):
        content = "x" * ((len(content) * 4 + 2) // 3)  # (the size its base64 would have)
    if isinstance(content, str) and content and len(content) <= _MAX_BLOB_SCAN:
        described = describe_text(f"data:{kind if '/' in kind else ''};base64,{content.strip()}")
        if described.startswith("<blob"):
            return described
    return f"<blob {kind}>"


def joined(parts: Sequence[str]) -> str | None:
    """Text parts joined by a newline (``None`` for none)."""
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else "\n".join(parts)


def request(name: Any, arguments: Any, call_id: Any) -> ToolRequest | None:
    """A :class:`~otel_progress.model.ToolRequest` from what a span says, or ``None``
    without a name. Arguments given as a JSON text are decoded (a text that is not JSON is
    kept: arguments that did not parse are a request too); absent, they are
    :data:`~otel_progress.model.NOT_CAPTURED`."""
    text = as_text(name)
    if not text:
        return None
    if arguments is None:
        arguments = NOT_CAPTURED
    elif isinstance(arguments, (str, bytes, bytearray)):
        arguments = decode_json(arguments)
        if isinstance(arguments, str):
            arguments = cap_text(arguments)
    if isinstance(call_id, int) and not isinstance(call_id, bool) and abs(call_id) < 2**63:
        ident: str | None = str(call_id)  # (an id given as a number; a huge one is no id)
    else:
        ident = as_text(call_id)
    return ToolRequest(name=text, arguments=arguments, call_id=ident or None)


class OutputParts:
    """Collects an output's texts, reasoning and requests (in order)."""

    __slots__ = ("reasoning", "requests", "texts")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.reasoning: list[str] = []
        self.requests: list[ToolRequest] = []

    def text(self, value: Any) -> None:
        """Add a text part (non-text values are not read; empty texts are skipped)."""
        text = as_text(value)
        if text:
            self.texts.append(cap_text(text))

    def thought(self, value: Any) -> None:
        """Add a reasoning part."""
        text = as_text(value)
        if text:
            self.reasoning.append(cap_text(text))

    def ask(self, name: Any, arguments: Any, call_id: Any) -> None:
        """Add a tool request (without a name it is not one)."""
        found = request(name, arguments, call_id)
        if found is not None:
            self.requests.append(found)

    def content(self, *, requests_known: bool = True) -> ModelOutputContent:
        """What was collected (``requests_known``: an empty list of requests is known to be
        empty, not unknown)."""
        return ModelOutputContent(joined(self.texts), joined(self.reasoning),
                                  tuple(self.requests) if self.requests or requests_known else None)


def _messages(value: Any) -> list[Any]:
    decoded = decode_json(value)
    return decoded[:MAX_PARTS] if isinstance(decoded, list) else []


def _genai_part(out: OutputParts, part: Mapping[str, Any]) -> None:
    kind = part.get("type")
    if kind == "text":
        out.text(part.get("content"))
    elif kind in ("reasoning", "thinking"):
        out.thought(part.get("content"))
    elif kind == "tool_call":
        if part.get("builtin") is not True:  # (Pydantic AI: a provider's built-in tool, run by the provider)
            out.ask(part.get("name"), part.get("arguments"), part.get("id"))
    elif kind in ("blob", "binary"):
        out.texts.append(blob_descriptor(part.get("mime_type") or part.get("media_type"), part.get("content")))
    elif kind == "file":
        out.texts.append(f"<file {as_text(part.get('mime_type')) or ''} {as_text(part.get('file_id')) or ''}>")
    elif kind == "uri":
        out.texts.append(f"<uri {as_text(part.get('mime_type')) or ''} {cap_text(as_text(part.get('uri')) or '')}>")
    # tool_call_response, server_tool_call(_response), compaction and unknown parts: not the
    # model asking the agent for anything, nor text it wrote


def genai_output(messages: Any) -> ModelOutputContent | None:
    """The output of a GenAI ``gen_ai.output.messages`` value (a JSON string or a list of
    ``{"role", "parts"}``), or ``None`` when it is no such value."""
    decoded = _messages(messages)
    if not decoded:
        return None
    out = OutputParts()
    for message in decoded:
        parts = message.get("parts") if isinstance(message, Mapping) else None
        if not isinstance(parts, list):
            continue
        for part in parts[:MAX_PARTS]:
            if isinstance(part, Mapping):
                _genai_part(out, part)
    return out.content()


def _texts_of(parts: Iterable[Any]) -> list[str]:
    texts: list[str] = []
    for part in parts:
        if isinstance(part, Mapping) and part.get("type") == "text":
            text = as_text(part.get("content"))
            if text:
                texts.append(text)
    return texts


def latest_user_text(messages: Any, texts_of: Callable[[Mapping[str, Any]], list[str]]) -> str | None:
    """The text of the latest ``user`` message that has text in a list of messages (decoded,
    or JSON text), its texts found by ``texts_of`` (a convention's message shape): a user
    message with no text (only tool results) is not a new request from the user."""
    decoded = decode_json(messages)
    if not isinstance(decoded, list):
        return None
    for message in reversed(decoded[-4096:]):
        if isinstance(message, Mapping) and message.get("role") == "user":
            texts = texts_of(message)
            if texts:
                return cap_text(joined(texts) or "")
    return None


def _genai_texts(message: Mapping[str, Any]) -> list[str]:
    parts = message.get("parts")
    return _texts_of(parts[:MAX_PARTS]) if isinstance(parts, list) else []


def genai_prompt(messages: Any) -> str | None:
    """The text of the latest ``user`` message with text in a GenAI ``gen_ai.input.messages``
    value (a user message made only of tool results is not a new request from the user)."""
    return latest_user_text(messages, _genai_texts)
