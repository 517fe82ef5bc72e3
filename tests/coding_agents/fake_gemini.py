"""A scripted Gemini API (``generativelanguage`` v1beta) on 127.0.0.1, for running the real
Gemini CLI offline.

Gemini CLI honours ``GOOGLE_GEMINI_BASE_URL`` with a ``GEMINI_API_KEY``. Per prompt it first
asks a routing classifier with a non-streaming ``POST /v1beta/models/{model}:generateContent``
and expects a JSON text (``complexity_reasoning`` / ``complexity_score``; older builds read
``reasoning`` / ``model_choice``, so both are sent); the agent's turns are
``:streamGenerateContent?alt=sse`` requests answered with server-sent ``data:`` chunks of
``GenerateContentResponse``. Other non-streaming checks it may make (loop or next-speaker
checks) get the same JSON, which they ignore or read as "nothing to do".

The script is a list of :class:`Step`. Which step answers a streaming request is decided by
the request: the number of ``functionResponse`` parts already in its ``contents``, so a
retried request gets the same answer.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeGeminiAPI", "Step"]

_CLASSIFIER = json.dumps(
    {
        "complexity_reasoning": "A short scripted task.",
        "complexity_score": 10,
        "reasoning": "A short scripted task.",
        "model_choice": "flash",
    }
)


@dataclass(frozen=True)
class Step:
    """One scripted model turn: call ``tool`` with ``args``, or answer ``message``."""

    tool: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    message: str | None = None


def _function_responses(body: dict[str, Any]) -> int:
    count = 0
    for content in body.get("contents") or ():
        if not isinstance(content, dict):
            continue
        for part in content.get("parts") or ():
            if isinstance(part, dict) and "functionResponse" in part:
                count += 1
    return count


class FakeGeminiAPI:
    """The scripted server. Use as a context manager; ``base_url`` is the host root.

    Attributes:
        requests: ``(path, decoded body)`` of every request, in arrival order.
        usage: ``(prompt, candidates)`` token counts sent with every answer.
    """

    def __init__(self, steps: list[Step], usage: tuple[int, int] = (900, 30)) -> None:
        self.steps = list(steps)
        self.usage = usage
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeGeminiAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _usage(self) -> dict[str, int]:
        prompt, candidates = self.usage
        return {
            "promptTokenCount": prompt,
            "candidatesTokenCount": candidates,
            "totalTokenCount": prompt + candidates,
        }

    def _classifier(self) -> dict[str, Any]:
        return {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": _CLASSIFIER}]},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": self._usage(),
            "modelVersion": "gemini-2.5-flash",
        }

    def _turn(self, body: dict[str, Any]) -> dict[str, Any]:
        index = _function_responses(body)
        step = self.steps[index] if index < len(self.steps) else Step(message="Done.")
        if step.tool is not None:
            part: dict[str, Any] = {
                "functionCall": {"name": step.tool, "args": step.args, "id": f"call_{index:03d}"}
            }
        else:
            part = {"text": step.message or "Done."}
        return {
            "candidates": [
                {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": self._usage(),
            "modelVersion": "gemini-2.5-flash",
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _send(self, status: int, payload: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self._send(200, b'{"models":[]}', "application/json")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                if not isinstance(body, dict):
                    body = {}
                with api._lock:
                    api.requests.append((self.path, body))
                if ":streamGenerateContent" in self.path:
                    data = json.dumps(api._turn(body))
                    self._send(200, f"data: {data}\r\n\r\n".encode(), "text/event-stream")
                elif ":generateContent" in self.path:
                    self._send(200, json.dumps(api._classifier()).encode(), "application/json")
                elif ":countTokens" in self.path:
                    self._send(200, b'{"totalTokens": 10}', "application/json")
                else:
                    self._send(404, b"{}", "application/json")

        return Handler
