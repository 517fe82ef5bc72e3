"""What the scripted model APIs (:mod:`.fake_anthropic`, :mod:`.fake_openai_chat`,
:mod:`.fake_openai_responses`, :mod:`.fake_gemini`) share: a threaded HTTP/1.1 server on
127.0.0.1 (an ephemeral port) used as a context manager, JSON request bodies, server-sent
events, ids, the kept requests and the scripted turn a request asks for. Each fake keeps
only its API's wire format, in :meth:`FakeAPI.get` and :meth:`FakeAPI.post`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self, TypeVar

__all__ = ["FakeAPI", "Reply", "assistant_turns", "json_reply", "scripted", "sse", "typed_sse"]

#: An answer: status, body, ``Content-Type`` (``None``: no such header).
Reply = tuple[int, bytes, "str | None"]
T = TypeVar("T")


def sse(data: Any, event: str | None = None, eol: str = "\n") -> bytes:
    """One server-sent event: ``data`` as JSON (a string is sent as it is), after an
    ``event:`` line if ``event`` is given; lines end with ``eol``."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}{eol}" if event is not None else ""
    return f"{head}data: {text}{eol}{eol}".encode()


def typed_sse(data: dict[str, Any]) -> bytes:
    """One server-sent event named after its data's ``type`` (Anthropic, OpenAI Responses)."""
    return sse(data, data["type"])


def json_reply(data: Any, status: int = 200) -> Reply:
    """A JSON answer (``data`` as JSON; bytes are sent as they are)."""
    body = data if isinstance(data, bytes) else json.dumps(data).encode()
    return status, body, "application/json"


def assistant_turns(body: dict[str, Any]) -> int:
    """How many assistant messages a chat-style request already has (the agent loop's turn)."""
    return sum(1 for m in body.get("messages", ()) if m.get("role") == "assistant")


def scripted(script: Sequence[T], turn: int, default: T) -> T:
    """The script's entry for ``turn``, or ``default`` past its end."""
    return script[turn] if turn < len(script) else default


class FakeAPI:
    """Base of the scripted servers: subclasses answer :meth:`get` and :meth:`post` (and
    :meth:`head`, which by default is not supported, as in :mod:`http.server`).

    Attributes:
        requests: what the fake chose to keep of each request (:meth:`keep`), in order.
    """

    thread_name = "fake-api"

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self._lock = threading.Lock()
        self._ids = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=self.thread_name, daemon=True)

    @property
    def root(self) -> str:
        """``http://127.0.0.1:<port>``."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def keep(self, item: Any) -> int:
        """Keep ``item`` in :attr:`requests`; how many are kept now."""
        with self._lock:
            self.requests.append(item)
            return len(self.requests)

    def _next_id(self, prefix: str, width: int = 20) -> str:
        with self._lock:
            self._ids += 1
            return f"{prefix}_{self._ids:0{width}d}"

    # -- what a subclass answers ---------------------------------------------------------

    def get(self, path: str) -> Reply:
        return json_reply(b"{}", 404)

    def post(self, path: str, body: dict[str, Any]) -> Reply:
        return json_reply(b"{}", 404)

    def head(self, path: str) -> Reply | None:
        return None

    def extra_headers(self) -> dict[str, str]:
        """Headers sent with every answer."""
        return {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _send(self, reply: Reply) -> None:
                status, payload, content_type = reply
                self.send_response(status)
                if content_type is not None:
                    self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                for key, value in fake.extra_headers().items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

            def do_HEAD(self) -> None:
                reply = fake.head(self.path)
                if reply is None:
                    self.send_error(HTTPStatus.NOT_IMPLEMENTED, f"Unsupported method ({self.command!r})")
                else:
                    self._send(reply)

            def do_GET(self) -> None:
                self._send(fake.get(self.path))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                self._send(fake.post(self.path, body if isinstance(body, dict) else {}))

        return Handler
