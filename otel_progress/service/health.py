"""The HTTP side port: health probes, Prometheus metrics and the traces held.

``GET /healthz``  200 ``ok`` while the process serves (liveness)
``GET /readyz``   200 ``ready`` once the gRPC port is bound and until shutdown starts; 503
                  while starting or draining (readiness: the load balancer stops sending)
``GET /metrics``  the self-metrics in the Prometheus text format
``GET /traces``   JSON ``{"active": [...], "closed": [...]}``: trace ids in state and
                  recently closed (which replica owns a trace; ``?limit=N``)
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

__all__ = ["HealthServer"]

_log = logging.getLogger(__name__)


class HealthServer:
    """A small threaded HTTP server on its own thread."""

    def __init__(
        self,
        address: str,
        *,
        ready: Callable[[], bool],
        metrics_text: Callable[[], str],
        traces: Callable[[int], dict[str, Any]],
    ) -> None:
        host, _, port = address.rpartition(":")
        outer = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "otel-progress"

            def log_message(self, format: str, *args: Any) -> None:
                _log.debug("health: " + format, *args)

            def _send(self, code: int, body: str, ctype: str = "text/plain; charset=utf-8") -> None:
                data = body.encode("utf-8")
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                url = urlparse(self.path)
                try:
                    if url.path == "/healthz":
                        self._send(200, "ok\n")
                    elif url.path == "/readyz":
                        if outer._ready():
                            self._send(200, "ready\n")
                        else:
                            self._send(503, "not ready\n")
                    elif url.path == "/metrics":
                        self._send(200, outer._metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
                    elif url.path == "/traces":
                        limit = int(parse_qs(url.query).get("limit", ["100000"])[0])
                        self._send(200, json.dumps(outer._traces(limit)), "application/json")
                    else:
                        self._send(404, "not found: try /healthz, /readyz, /metrics, /traces\n")
                except Exception as exc:  # never kill the probe thread
                    self._send(500, f"error: {exc}\n")

        self._ready = ready
        self._metrics_text = metrics_text
        self._traces = traces
        self._server = ThreadingHTTPServer((host.strip("[]") or "127.0.0.1", int(port)), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="otel-progress-health", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(2.0)
