"""A scripted Anthropic Messages API on 127.0.0.1, for running the real Claude Code CLI
offline (``ANTHROPIC_BASE_URL=http://127.0.0.1:<port>``).

``POST /v1/messages`` answers, streaming (SSE) or not as the request asks, from a script:
the n-th request that offers tools (the agent loop's turns: n = the number of assistant
messages already in the conversation) gets ``script[n]``, a list of tool calls
``(tool name, input)``; past the script it answers with a final text. Requests without
tools (titles, summaries) get a short text. ``/v1/messages/count_tokens`` answers a count.
Every request body is kept in :attr:`FakeAnthropic.requests` for assertions.

Compaction: ``context`` gives, per scripted turn, the ``input_tokens`` the answer reports
(the size of the conversation as the API saw it); a turn reported near the CLI's
auto-compact window (``CLAUDE_CODE_AUTO_COMPACT_WINDOW``) makes Claude Code compact before
its next request. The compaction's own request (its last user message asks for a
``<summary>``) is answered with a summary text and kept in :attr:`FakeAnthropic.compactions`.
A compaction rewrites the conversation, so with ``context`` the turn is not counted from the
assistant messages but is the number of agent-loop requests answered so far.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .fake_api import FakeAPI, Reply, assistant_turns, json_reply, scripted, typed_sse

__all__ = ["FakeAnthropic"]

ToolUse = tuple[str, dict[str, Any]]

_NOT_FOUND = b'{"type":"error","error":{"type":"not_found_error","message":"no"}}'


class FakeAnthropic(FakeAPI):
    """The scripted API server; use as a context manager (``url`` is its base URL)."""

    thread_name = "fake-anthropic"

    def __init__(self, script: Sequence[Sequence[ToolUse]], final_text: str = "Done.",
                 model: str = "claude-sonnet-4-5", context: Sequence[int] | None = None) -> None:
        self.script = [list(turn) for turn in script]
        self.final_text = final_text
        self.model = model
        self.context = list(context) if context is not None else None
        self.compactions: list[dict[str, Any]] = []
        self._turns = 0
        super().__init__()

    @property
    def url(self) -> str:
        return self.root

    # -- the answers --------------------------------------------------------------------

    def _next_id(self, prefix: str, width: int = 24) -> str:
        return super()._next_id(prefix, width)

    def blocks_for(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
        """The content blocks answering one request, and the ``input_tokens`` to report."""
        if not body.get("tools"):
            return [{"type": "text", "text": "Scripted session"}], 120
        if _asks_for_summary(body):
            self.keep_compaction(body)
            return [{"type": "text", "text": _SUMMARY}], 120
        if self.context is None:
            turn = assistant_turns(body)
        else:
            with self._lock:
                turn, self._turns = self._turns, self._turns + 1
        tokens = scripted(self.context, turn, 120) if self.context is not None else 120
        calls = scripted(self.script, turn, None)
        if calls is not None:
            return [{"type": "tool_use", "id": self._next_id("toolu"), "name": name, "input": args}
                    for name, args in calls], tokens
        return [{"type": "text", "text": self.final_text}], tokens

    def keep_compaction(self, body: dict[str, Any]) -> None:
        with self._lock:
            self.compactions.append(body)

    def _stream(self, blocks: list[dict[str, Any]], tokens: int = 120) -> bytes:
        out = [typed_sse({"type": "message_start", "message": {
            "id": self._next_id("msg"), "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": tokens, "output_tokens": 1, "cache_read_input_tokens": 0,
                      "cache_creation_input_tokens": 0}}})]
        for i, block in enumerate(blocks):
            if block["type"] == "text":
                out.append(typed_sse({"type": "content_block_start", "index": i,
                                      "content_block": {"type": "text", "text": ""}}))
                out.append(typed_sse({"type": "content_block_delta", "index": i,
                                      "delta": {"type": "text_delta", "text": block["text"]}}))
            else:
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                out.append(typed_sse({"type": "content_block_start", "index": i, "content_block": start}))
                out.append(typed_sse({"type": "content_block_delta", "index": i, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(block["input"])}}))
            out.append(typed_sse({"type": "content_block_stop", "index": i}))
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        out.append(typed_sse({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                              "usage": {"output_tokens": 30}}))
        out.append(typed_sse({"type": "message_stop"}))
        return b"".join(out)

    def _message(self, blocks: list[dict[str, Any]], tokens: int = 120) -> bytes:
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        return json.dumps({
            "id": self._next_id("msg"), "type": "message", "role": "assistant", "model": self.model,
            "content": blocks, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": tokens, "output_tokens": 30}}).encode()

    # -- the wire ------------------------------------------------------------------------

    def extra_headers(self) -> dict[str, str]:
        return {"request-id": self._next_id("req")}

    def head(self, path: str) -> Reply:  # connectivity checks
        return 200, b"", "text/plain"

    def get(self, path: str) -> Reply:
        return json_reply(_NOT_FOUND, 404)

    def post(self, path: str, body: dict[str, Any]) -> Reply:
        path = path.split("?", 1)[0]
        if path.endswith("/count_tokens"):
            return json_reply(b'{"input_tokens": 120}')
        if not path.endswith("/v1/messages"):
            return self.get(path)
        self.keep(body)
        blocks, tokens = self.blocks_for(body)
        if body.get("stream"):
            return 200, self._stream(blocks, tokens), "text/event-stream"
        return 200, self._message(blocks, tokens), "application/json"


#: The summary a compaction request gets (Claude Code asks for ``<analysis>`` and ``<summary>``).
_SUMMARY = ("<analysis>The user asked to work on notes.txt; the notes were read.</analysis>\n"
            "<summary>1. Primary Request and Intent: work on notes.txt.\n"
            "2. Files and Code Sections: notes.txt was read.</summary>")


def _asks_for_summary(body: dict[str, Any]) -> bool:
    """Whether a request is Claude Code's compaction call: its last user message asks for a
    summary of the conversation in ``<summary>`` tags."""
    messages = body.get("messages") or ()
    if not messages or not isinstance(messages[-1], dict) or messages[-1].get("role") != "user":
        return False
    content = messages[-1].get("content")
    parts = [content] if isinstance(content, str) else [
        b.get("text") for b in content or () if isinstance(b, dict) and b.get("type") == "text"]
    return any(isinstance(t, str) and "<summary>" in t and "summary of the conversation" in t for t in parts)
