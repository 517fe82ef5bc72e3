"""A scripted Anthropic Messages API on 127.0.0.1, for running the real Claude Code CLI
offline (``ANTHROPIC_BASE_URL=http://127.0.0.1:<port>``).

``POST /v1/messages`` answers, streaming (SSE) or not as the request asks, from a script:
the n-th request that offers tools (the agent loop's turns: n = the number of assistant
messages already in the conversation) gets ``script[n]``, a list of tool calls
``(tool name, input)``; past the script it answers with a final text. Requests without
tools (titles, summaries) get a short text. ``/v1/messages/count_tokens`` answers a count.
Every request body is kept in :attr:`FakeAnthropic.requests` for assertions.
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
                 model: str = "claude-sonnet-4-5") -> None:
        self.script = [list(turn) for turn in script]
        self.final_text = final_text
        self.model = model
        super().__init__()

    @property
    def url(self) -> str:
        return self.root

    # -- the answers --------------------------------------------------------------------

    def _next_id(self, prefix: str, width: int = 24) -> str:
        return super()._next_id(prefix, width)

    def blocks_for(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The content blocks answering one request."""
        if not body.get("tools"):
            return [{"type": "text", "text": "Scripted session"}]
        calls = scripted(self.script, assistant_turns(body), None)
        if calls is not None:
            return [{"type": "tool_use", "id": self._next_id("toolu"), "name": name, "input": args}
                    for name, args in calls]
        return [{"type": "text", "text": self.final_text}]

    def _stream(self, blocks: list[dict[str, Any]]) -> bytes:
        out = [typed_sse({"type": "message_start", "message": {
            "id": self._next_id("msg"), "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 120, "output_tokens": 1, "cache_read_input_tokens": 0,
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

    def _message(self, blocks: list[dict[str, Any]]) -> bytes:
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        return json.dumps({
            "id": self._next_id("msg"), "type": "message", "role": "assistant", "model": self.model,
            "content": blocks, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 120, "output_tokens": 30}}).encode()

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
        blocks = self.blocks_for(body)
        if body.get("stream"):
            return 200, self._stream(blocks), "text/event-stream"
        return 200, self._message(blocks), "application/json"
