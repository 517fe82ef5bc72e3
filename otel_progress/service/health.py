"""The HTTP side port: health probes, Prometheus metrics and the traces held.

``GET /healthz``  200 ``ok`` while the process serves (liveness)
``GET /readyz``   200 ``ready`` once the gRPC port is bound and until shutdown starts, and
                  (inline mode) while the downstream is reachable; 503 with the reason
                  otherwise (readiness: the load balancer stops sending)
``GET /metrics``  the self-metrics in the Prometheus text format
``GET /traces``   only with ``--health-traces``: JSON ``{"active": [...], "closed": [...]}``,
                  trace ids in state and recently closed (which replica owns a trace;
                  ``?limit=N``, 1 to 100000, default 1000); with a bearer token configured
                  it requires ``Authorization: Bearer <token>``

Liveness must not depend on who else is connected: where the port is reachable by others
(the k8s manifest binds 0.0.0.0), holding connections open must not make ``/healthz``
fail and get the pod restarted. So every connection is served by one asyncio event loop
on its own thread (a connection costs a socket, not a thread), answered as soon as its
request head is complete, and closed after the answer. At most ``max_connections`` are
open at once; a new connection beyond that closes the *oldest connection that has not yet
sent a complete request* (idle or half-open, counted as ``shed``), and only when every
connection is in the middle of an answer is the new one answered ``503 busy`` (``busy``).
A connection that sends no complete request head within ``idle_timeout`` seconds, or whose
head is over 16 KiB, is closed. ``on_refused(reason)`` is told of each shed or refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["MAX_TRACES_LIMIT", "HealthServer"]

_log = logging.getLogger(__name__)

MAX_TRACES_LIMIT = 100_000
_DEFAULT_LIMIT = 1000
_MAX_HEAD = 16 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
         b"Connection: close\r\n\r\nbusy\n")

Answer = tuple[int, str, str, tuple[tuple[str, str], ...]]  # status, body, content type, headers


class _Connection:
    __slots__ = ("answering", "transport")

    def __init__(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.answering = False  # its request head is complete: no longer sheddable


class HealthServer:
    """A small HTTP server on its own thread (see the module docstring)."""

    def __init__(
        self,
        address: str,
        *,
        ready: Callable[[], tuple[bool, str]],
        metrics_text: Callable[[], str],
        traces: Callable[[int], dict[str, Any]] | None = None,
        token: str = "",
        max_connections: int = 256,
        idle_timeout: float = 5.0,
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        host, _, port = address.rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        self._ready = ready
        self._metrics_text = metrics_text
        self._traces = traces
        self._token = token
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self._on_refused = on_refused
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.create_server((host, int(port)), family=family, backlog=512)
        self.port = int(self._socket.getsockname()[1])
        # insertion order is age: the first idle one is the oldest
        self._connections: dict[_Connection, None] = {}
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._run, name="otel-progress-health", daemon=True)

    @property
    def open_connections(self) -> int:
        """Connections open now (for tests and diagnostics)."""
        return len(self._connections)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if not self._thread.is_alive():
            self._socket.close()
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(2.0)

    # -- the loop ------------------------------------------------------------------------

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(self._serve, sock=self._socket, limit=_MAX_HEAD, backlog=512))
            loop.run_forever()
        finally:
            if self._server is not None:
                self._server.close()
            for conn in list(self._connections):
                conn.transport.abort()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()
            self._socket.close()

    def _admit(self, conn: _Connection) -> bool:
        """Make room for ``conn`` at the limit: close the oldest connection still waiting
        for its request; False (refuse ``conn``) when every other one is being answered."""
        if len(self._connections) < self.max_connections:
            self._connections[conn] = None
            return True
        oldest = next((c for c in self._connections if not c.answering), None)
        if oldest is None:
            self._refused("busy")
            return False
        del self._connections[oldest]
        oldest.transport.abort()
        self._refused("shed")
        self._connections[conn] = None
        return True

    def _refused(self, reason: str) -> None:
        if self._on_refused is not None:
            with contextlib.suppress(Exception):
                self._on_refused(reason)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(writer.transport)
        if not self._admit(conn):
            with contextlib.suppress(Exception):
                writer.write(_BUSY)
                writer.transport.close()  # flushes the answer, then closes
            return
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_timeout)
            except asyncio.LimitOverrunError:
                conn.answering = True
                answer: Answer = (431, "request head too large\n", "text/plain; charset=utf-8", ())
                method = "GET"
            else:
                conn.answering = True
                method, answer = self._answer(head)
            writer.write(_response(answer, body=method != "HEAD"))
            await asyncio.wait_for(writer.drain(), self.idle_timeout)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError):
            pass  # idle past the timeout, or the client went away
        except Exception as exc:  # never a traceback, never a dead loop
            _log.warning("otel-progress: health request failed: %s", exc)
        finally:
            self._connections.pop(conn, None)
            writer.close()  # sends what is buffered, then closes (nothing to send after a shed)

    # -- the answers ---------------------------------------------------------------------

    def _answer(self, head: bytes) -> tuple[str, Answer]:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return "GET", (400, "bad request\n", "text/plain; charset=utf-8", ())
        method, target = parts[0], parts[1]
        if method not in ("GET", "HEAD"):
            return method, (405, "only GET\n", "text/plain; charset=utf-8", (("Allow", "GET, HEAD"),))
        authorization = ""
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep and name.strip().lower() == "authorization":
                authorization = value.strip()
        url = urlsplit(target)
        try:
            return method, self._route(url.path, url.query, authorization)
        except Exception as exc:
            _log.warning("otel-progress: health request %s failed: %s", url.path[:100], exc)
            return method, (500, "internal error\n", "text/plain; charset=utf-8", ())

    def _route(self, path: str, query: str, authorization: str) -> Answer:
        text = "text/plain; charset=utf-8"
        if path == "/healthz":
            return 200, "ok\n", text, ()
        if path == "/readyz":
            ok, why = self._ready()
            return (200, "ready\n", text, ()) if ok else (503, f"not ready: {why}\n", text, ())
        if path == "/metrics":
            return 200, self._metrics_text(), "text/plain; version=0.0.4; charset=utf-8", ()
        if path == "/traces":
            return self._traces_answer(query, authorization)
        return 404, "not found: try /healthz, /readyz, /metrics\n", text, ()

    def _traces_answer(self, query: str, authorization: str) -> Answer:
        text = "text/plain; charset=utf-8"
        if self._traces is None:
            return 404, "not found: /traces is off (enable it with --health-traces)\n", text, ()
        if self._token and not self._authorized(authorization):
            return (401, "missing or wrong bearer token: send 'Authorization: Bearer <token>'\n", text,
                    (("WWW-Authenticate", "Bearer"),))
        values = parse_qs(query, keep_blank_values=True).get("limit", [str(_DEFAULT_LIMIT)])
        raw = values[-1].strip()
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_TRACES_LIMIT:
            return 400, f"bad limit {raw[:40]!r}: expected an integer from 1 to {MAX_TRACES_LIMIT}\n", text, ()
        return 200, json.dumps(self._traces(int(raw))), "application/json", ()

    def _authorized(self, header: str) -> bool:
        scheme, _, token = header.strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self._token.encode())


def _response(answer: Answer, body: bool = True) -> bytes:
    status, text, ctype, headers = answer
    data = text.encode("utf-8")
    head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}", "Server: otel-progress",
            f"Content-Type: {ctype}", f"Content-Length: {len(data)}", "Connection: close"]
    head += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (data if body else b"")
