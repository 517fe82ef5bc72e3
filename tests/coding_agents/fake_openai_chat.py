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
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeOpenAIChat"]

ToolCallSpec = tuple[str, dict[str, Any]]


class FakeOpenAIChat:
    """The scripted API server; use as a context manager (``url`` ends with ``/v1``)."""

    def __init__(self, script: Sequence[Sequence[ToolCallSpec]], final_text: str = "Done.",
                 model: str = "qwen3-coder-plus") -> None:
        self.script = [list(turn) for turn in script]
        self.final_text = final_text
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ids = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-openai-chat", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeOpenAIChat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next_id(self, prefix: str) -> str:
        with self._lock:
            self._ids += 1
            return f"{prefix}_{self._ids:020d}"

    def answer(self, body: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
        """The text and tool calls answering one request."""
        if body.get("tools"):
            turn = sum(1 for m in body.get("messages", ()) if m.get("role") == "assistant")
            if turn < len(self.script):
                return None, [{"id": self._next_id("call"), "type": "function",
                               "function": {"name": name, "arguments": json.dumps(args)}}
                              for name, args in self.script[turn]]
        return self.final_text, []

    def _chunks(self, text: str | None, calls: list[dict[str, Any]]) -> bytes:
        ident = self._next_id("chatcmpl")
        base = {"id": ident, "object": "chat.completion.chunk", "created": 1_700_000_000, "model": self.model}

        def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
            data: dict[str, Any] = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            if usage is not None:
                data["usage"] = usage
            return b"data: " + json.dumps(data).encode() + b"\n\n"

        out = [chunk({"role": "assistant", "content": ""})]
        if text is not None:
            out.append(chunk({"content": text}))
        for i, call in enumerate(calls):
            out.append(chunk({"tool_calls": [{"index": i, **call}]}))
        finish = "tool_calls" if calls else "stop"
        out.append(chunk({}, finish, {"prompt_tokens": 150, "completion_tokens": 25, "total_tokens": 175}))
        out.append(b"data: [DONE]\n\n")
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

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path.split("?", 1)[0].endswith("/models"):
                    body = {"object": "list", "data": [{"id": fake.model, "object": "model", "owned_by": "test"}]}
                    self._send(200, json.dumps(body).encode(), "application/json")
                else:
                    self._send(404, b'{"error": {"message": "not found"}}', "application/json")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                if not self.path.split("?", 1)[0].endswith("/chat/completions"):
                    self._send(404, b'{"error": {"message": "not found"}}', "application/json")
                    return
                with fake._lock:
                    fake.requests.append(body)
                text, calls = fake.answer(body)
                if body.get("stream"):
                    self._send(200, fake._chunks(text, calls), "text/event-stream")
                else:
                    self._send(200, fake._completion(text, calls), "application/json")

        return Handler
