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

Connections are bounded: at most ``max_connections`` are served at once (each on its own
thread), more are answered 503 and closed at once, and a connection that sends nothing
for ``idle_timeout`` seconds is closed, so idle or half-open connections cannot hold
threads.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

__all__ = ["MAX_TRACES_LIMIT", "HealthServer"]

_log = logging.getLogger(__name__)

MAX_TRACES_LIMIT = 100_000
_DEFAULT_LIMIT = 1000
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
         b"Connection: close\r\n\r\nbusy\n")


class _BoundedServer(ThreadingHTTPServer):
    """A threading HTTP server that serves at most ``max_connections`` at once."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # listen backlog: a burst of connections is accepted (and refused) at once

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 max_connections: int) -> None:
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.settimeout(0.5)
                request.sendall(_BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


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
        max_connections: int = 16,
        idle_timeout: float = 5.0,
    ) -> None:
        host, _, port = address.rpartition(":")
        outer = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "otel-progress"
            timeout = idle_timeout  # socket timeout: an idle connection is closed

            def log_message(self, format: str, *args: Any) -> None:
                _log.debug("health: " + format, *args)

            def _send(self, code: int, body: str, ctype: str = "text/plain; charset=utf-8",
                      headers: tuple[tuple[str, str], ...] = ()) -> None:
                data = body.encode("utf-8")
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers:
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                url = urlparse(self.path)
                try:
                    if url.path == "/healthz":
                        self._send(200, "ok\n")
                    elif url.path == "/readyz":
                        ok, why = outer._ready()
                        if ok:
                            self._send(200, "ready\n")
                        else:
                            self._send(503, f"not ready: {why}\n")
                    elif url.path == "/metrics":
                        self._send(200, outer._metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
                    elif url.path == "/traces":
                        self._traces(url.query)
                    else:
                        self._send(404, "not found: try /healthz, /readyz, /metrics\n")
                except (TimeoutError, BrokenPipeError, ConnectionResetError):
                    pass  # the client went away
                except Exception as exc:  # never kill the server thread, never a traceback
                    _log.warning("otel-progress: health request %s failed: %s", url.path, exc)
                    with contextlib.suppress(OSError):
                        self._send(500, "internal error\n")

            def _traces(self, query: str) -> None:
                if outer._traces is None:
                    self._send(404, "not found: /traces is off (enable it with --health-traces)\n")
                    return
                if outer._token and not outer._authorized(self.headers.get("Authorization", "")):
                    self._send(401, "missing or wrong bearer token: send 'Authorization: Bearer <token>'\n",
                               headers=(("WWW-Authenticate", "Bearer"),))
                    return
                values = parse_qs(query, keep_blank_values=True).get("limit", [str(_DEFAULT_LIMIT)])
                raw = values[-1].strip()
                if not raw.isdigit() or not 1 <= int(raw) <= MAX_TRACES_LIMIT:
                    self._send(400, f"bad limit {raw[:40]!r}: expected an integer from 1 to {MAX_TRACES_LIMIT}\n")
                    return
                self._send(200, json.dumps(outer._traces(int(raw))), "application/json")

        self._ready = ready
        self._metrics_text = metrics_text
        self._traces = traces
        self._token = token
        self._server = _BoundedServer((host.strip("[]") or "127.0.0.1", int(port)), Handler, max_connections)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="otel-progress-health", daemon=True)

    def _authorized(self, header: str) -> bool:
        scheme, _, token = header.strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self._token.encode())

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(2.0)
