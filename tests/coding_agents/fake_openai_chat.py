"""A scripted OpenAI Chat Completions API on 127.0.0.1, for running OpenAI-compatible
coding CLIs (Qwen Code: ``--auth-type openai --openai-base-url http://127.0.0.1:<port>/v1``)
offline.

``POST …/chat/completions`` answers, streaming (SSE chunks) or not as the request asks,
from a script: a request that offers tools, with n assistant messages already in the
conversation, gets ``script[n]`` (a list of tool calls ``(function name, arguments)``);
past the script, and for requests without tools, it answers with a final text.
``GET …/models`` lists the model. Request bodies are kept in :attr:`FakeOpenAIChat.requests`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .fake_api import FakeAPI, Reply, assistant_turns, json_reply, scripted, sse

__all__ = ["FakeOpenAIChat"]

ToolCallSpec = tuple[str, dict[str, Any]]

_NOT_FOUND = b'{"error": {"message": "not found"}}'


class FakeOpenAIChat(FakeAPI):
    """The scripted API server; use as a context manager (``url`` ends with ``/v1``)."""

    thread_name = "fake-openai-chat"

    def __init__(self, script: Sequence[Sequence[ToolCallSpec]], final_text: str = "Done.",
                 model: str = "qwen3-coder-plus") -> None:
        self.script = [list(turn) for turn in script]
        self.final_text = final_text
        self.model = model
        super().__init__()

    @property
    def url(self) -> str:
        return f"{self.root}/v1"

    def answer(self, body: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
        """The text and tool calls answering one request."""
        calls = scripted(self.script, assistant_turns(body), None) if body.get("tools") else None
        if calls is not None:
            return None, [{"id": self._next_id("call"), "type": "function",
                           "function": {"name": name, "arguments": json.dumps(args)}}
                          for name, args in calls]
        return self.final_text, []

    def _chunks(self, text: str | None, calls: list[dict[str, Any]]) -> bytes:
        ident = self._next_id("chatcmpl")
        base = {"id": ident, "object": "chat.completion.chunk", "created": 1_700_000_000, "model": self.model}

        def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
            data: dict[str, Any] = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            if usage is not None:
                data["usage"] = usage
            return sse(data)

        out = [chunk({"role": "assistant", "content": ""})]
        if text is not None:
            out.append(chunk({"content": text}))
        for i, call in enumerate(calls):
            out.append(chunk({"tool_calls": [{"index": i, **call}]}))
        finish = "tool_calls" if calls else "stop"
        out.append(chunk({}, finish, {"prompt_tokens": 150, "completion_tokens": 25, "total_tokens": 175}))
        out.append(sse("[DONE]"))
        return b"".join(out)

    def _completion(self, text: str | None, calls: list[dict[str, Any]]) -> bytes:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        return json.dumps({
            "id": self._next_id("chatcmpl"), "object": "chat.completion", "created": 1_700_000_000,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 150, "completion_tokens": 25, "total_tokens": 175}}).encode()

    def get(self, path: str) -> Reply:
        if path.split("?", 1)[0].endswith("/models"):
            return json_reply({"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "test"}]})
        return json_reply(_NOT_FOUND, 404)

    def post(self, path: str, body: dict[str, Any]) -> Reply:
        if not path.split("?", 1)[0].endswith("/chat/completions"):
            return json_reply(_NOT_FOUND, 404)
        self.keep(body)
        text, calls = self.answer(body)
        if body.get("stream"):
            return 200, self._chunks(text, calls), "text/event-stream"
        return 200, self._completion(text, calls), "application/json"
