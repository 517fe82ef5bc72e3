"""A small OTLP/HTTP receiver on 127.0.0.1 for the tests of real coding CLIs.

It accepts ``POST /v1/logs``, ``/v1/traces`` and ``/v1/metrics`` with an OTLP/JSON or an
OTLP protobuf body (``Content-Type: application/x-protobuf``), optionally gzip-encoded,
sized by ``Content-Length`` or sent chunked without one (Claude Code does), and keeps
every export request, decoded to the OTLP/JSON form (hex ids, camelCase keys), by signal.
It answers as an OTLP/HTTP server does: an empty ``Export*ServiceResponse`` in the
request's encoding, 400 for a body it cannot decode, 404 for another path.

Usage::

    with OtlpHttpReceiver() as receiver:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
        ...
        receiver.wait_for("logs", lambda reqs: len(reqs) >= 1, timeout=10)
        write_jsonl(path, receiver.requests["logs"])
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import threading
import time
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

__all__ = ["OtlpHttpReceiver", "proto_to_json"]

#: signal -> (request message, response message)
_MESSAGES: dict[str, tuple[Any, Any]] = {
    "logs": (logs_service_pb2.ExportLogsServiceRequest, logs_service_pb2.ExportLogsServiceResponse),
    "traces": (trace_service_pb2.ExportTraceServiceRequest, trace_service_pb2.ExportTraceServiceResponse),
    "metrics": (metrics_service_pb2.ExportMetricsServiceRequest, metrics_service_pb2.ExportMetricsServiceResponse),
}
_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})
#: The largest body accepted (a bound, so a broken client cannot exhaust memory).
MAX_BODY_BYTES = 64 * 1024 * 1024


def _hex_ids(node: Any) -> Any:
    """Protobuf's JSON mapping writes ids in base64; OTLP/JSON writes them in hex."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str):
                with contextlib.suppress(ValueError):
                    node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)
    return node


def proto_to_json(signal: str, body: bytes) -> dict[str, Any]:
    """An OTLP protobuf export request of ``signal`` as its OTLP/JSON document."""
    message = _MESSAGES[signal][0]()
    message.ParseFromString(body)
    return _hex_ids(json_format.MessageToDict(message))


class OtlpHttpReceiver:
    """An OTLP/HTTP receiver on 127.0.0.1 (an ephemeral port) that keeps what it gets.

    Attributes:
        requests: ``{"logs": [...], "traces": [...], "metrics": [...]}``: the export
            requests as OTLP/JSON documents, in arrival order.
        encodings: the encoding of each request kept, ``"json"`` or ``"protobuf"``, by
            signal (parallel to ``requests``).
        rejected: how many bodies could not be decoded (answered 400).
    """

    def __init__(self) -> None:
        self.requests: dict[str, list[dict[str, Any]]] = {name: [] for name in _MESSAGES}
        self.encodings: dict[str, list[str]] = {name: [] for name in _MESSAGES}
        self.rejected = 0
        self._cond = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-http", daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL (``http://127.0.0.1:<port>``); signals are under ``/v1/<signal>``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OtlpHttpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def wait_for(self, signal: str, ready: Callable[[list[dict[str, Any]]], bool], timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until ``ready(requests[signal])``; returns it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not ready(self.requests[signal]):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def _keep(self, signal: str, document: dict[str, Any], encoding: str) -> None:
        with self._cond:
            self.requests[signal].append(document)
            self.encodings[signal].append(encoding)
            self._cond.notify_all()

    def _reject(self) -> None:
        with self._cond:
            self.rejected += 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _read_body(self) -> bytes | None:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    data = bytearray()
                    while True:
                        line = self.rfile.readline(1024)
                        if not line:
                            return None
                        try:
                            size = int(line.split(b";")[0].strip() or b"0", 16)
                        except ValueError:
                            return None
                        if size == 0:
                            while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                                pass  # trailers
                            return bytes(data)
                        if len(data) + size > MAX_BODY_BYTES:
                            return None
                        data += self.rfile.read(size)
                        self.rfile.readline(8)
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY_BYTES:
                    return None
                return self.rfile.read(length) if length else b""

            def _answer(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                signal = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
                body = self._read_body()
                if signal not in _MESSAGES or not self.path.startswith("/v1/"):
                    self._answer(404, b"", "text/plain")
                    return
                if body is None:
                    receiver._reject()
                    self.close_connection = True
                    self._answer(400, b"bad body", "text/plain")
                    return
                protobuf = "protobuf" in self.headers.get("Content-Type", "").lower()
                try:
                    encoding = self.headers.get("Content-Encoding", "").lower()
                    if encoding == "gzip":
                        body = gzip.decompress(body)
                    elif encoding == "deflate":
                        body = zlib.decompress(body)
                    if protobuf:
                        document = proto_to_json(signal, body)
                    else:
                        document = json.loads(body or b"{}")
                        if not isinstance(document, dict):
                            raise ValueError("not a JSON object")
                except Exception:
                    receiver._reject()
                    self._answer(400, b"cannot decode the body", "text/plain")
                    return
                receiver._keep(signal, document, "protobuf" if protobuf else "json")
                response = _MESSAGES[signal][1]()
                if protobuf:
                    self._answer(200, response.SerializeToString(), "application/x-protobuf")
                else:
                    self._answer(200, b"{}", "application/json")

        return Handler
