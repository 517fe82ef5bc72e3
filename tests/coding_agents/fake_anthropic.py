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
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeAnthropic"]

ToolUse = tuple[str, dict[str, Any]]


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


class FakeAnthropic:
    """The scripted API server; use as a context manager (``url`` is its base URL)."""

    def __init__(self, script: Sequence[Sequence[ToolUse]], final_text: str = "Done.",
                 model: str = "claude-sonnet-4-5") -> None:
        self.script = [list(turn) for turn in script]
        self.final_text = final_text
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ids = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-anthropic", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- the answers --------------------------------------------------------------------

    def _next_id(self, prefix: str) -> str:
        with self._lock:
            self._ids += 1
            return f"{prefix}_{self._ids:024d}"

    def blocks_for(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The content blocks answering one request."""
        if not body.get("tools"):
            return [{"type": "text", "text": "Scripted session"}]
        turn = sum(1 for m in body.get("messages", ()) if m.get("role") == "assistant")
        if turn < len(self.script):
            return [{"type": "tool_use", "id": self._next_id("toolu"), "name": name, "input": args}
                    for name, args in self.script[turn]]
        return [{"type": "text", "text": self.final_text}]

    def _stream(self, blocks: list[dict[str, Any]]) -> bytes:
        out = [_sse("message_start", {"type": "message_start", "message": {
            "id": self._next_id("msg"), "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 120, "output_tokens": 1, "cache_read_input_tokens": 0,
                      "cache_creation_input_tokens": 0}}})]
        for i, block in enumerate(blocks):
            if block["type"] == "text":
                out.append(_sse("content_block_start", {"type": "content_block_start", "index": i,
                                                        "content_block": {"type": "text", "text": ""}}))
                out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                        "delta": {"type": "text_delta", "text": block["text"]}}))
            else:
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                out.append(_sse("content_block_start", {"type": "content_block_start", "index": i,
                                                        "content_block": start}))
                out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(block["input"])}}))
            out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": i}))
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        out.append(_sse("message_delta", {"type": "message_delta",
                                          "delta": {"stop_reason": stop, "stop_sequence": None},
                                          "usage": {"output_tokens": 30}}))
        out.append(_sse("message_stop", {"type": "message_stop"}))
        return b"".join(out)

    def _message(self, blocks: list[dict[str, Any]]) -> bytes:
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        return json.dumps({
            "id": self._next_id("msg"), "type": "message", "role": "assistant", "model": self.model,
            "content": blocks, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 120, "output_tokens": 30}}).encode()

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
                self.send_header("request-id", fake._next_id("req"))
                self.end_headers()
                self.wfile.write(body)

            def do_HEAD(self) -> None:  # connectivity checks
                self._send(200, b"", "text/plain")

            def do_GET(self) -> None:
                self._send(404, b'{"type":"error","error":{"type":"not_found_error","message":"no"}}',
                           "application/json")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                path = self.path.split("?", 1)[0]
                if path.endswith("/count_tokens"):
                    self._send(200, b'{"input_tokens": 120}', "application/json")
                    return
                if not path.endswith("/v1/messages"):
                    self.do_GET()
                    return
                with fake._lock:
                    fake.requests.append(body)
                blocks = fake.blocks_for(body)
                if body.get("stream"):
                    self._send(200, fake._stream(blocks), "text/event-stream")
                else:
                    self._send(200, fake._message(blocks), "application/json")

        return Handler
