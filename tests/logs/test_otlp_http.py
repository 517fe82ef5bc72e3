"""The tests' OTLP/HTTP receiver (tests/coding_agents/otlp_http.py): JSON and protobuf
bodies, with Content-Length or chunked without it, gzip, and a bad body answered 400."""

from __future__ import annotations

import gzip
import http.client
import json
import socket

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from tests.coding_agents.otlp_http import OtlpHttpReceiver

_RECORD = {"eventName": "x.y", "traceId": "0af7651916cd43dd8448eb211c80319c"}
_DOC = {"resourceLogs": [{"scopeLogs": [{"logRecords": [_RECORD]}]}]}


def _post(endpoint: str, path: str, body: bytes, headers: dict[str, str]) -> int:
    host, port = endpoint.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    conn.request("POST", path, body=body, headers=headers)
    status = conn.getresponse().status
    conn.close()
    return status


def test_json_with_length_and_gzip() -> None:
    with OtlpHttpReceiver() as r:
        assert _post(r.endpoint, "/v1/logs", json.dumps(_DOC).encode(), {"Content-Type": "application/json"}) == 200
        assert _post(r.endpoint, "/v1/logs", gzip.compress(json.dumps(_DOC).encode()),
                     {"Content-Type": "application/json", "Content-Encoding": "gzip"}) == 200
        assert r.requests["logs"] == [_DOC, _DOC]
        assert r.encodings["logs"] == ["json", "json"]


def test_chunked_without_content_length() -> None:
    body = json.dumps(_DOC).encode()
    with OtlpHttpReceiver() as r:
        port = int(r.endpoint.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:10], body[10:]))
            s.sendall(b"POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n")
            assert s.recv(64).startswith(b"HTTP/1.1 200")
        assert r.wait_for("logs", lambda reqs: len(reqs) == 1, timeout=5)
        assert r.requests["logs"] == [_DOC]


def test_protobuf_ids_become_hex() -> None:
    request = ExportLogsServiceRequest()
    record = request.resource_logs.add().scope_logs.add().log_records.add()
    record.trace_id = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
    record.event_name = "x.y"
    record.attributes.append(KeyValue(key="session.id", value={"string_value": "s1"}))
    with OtlpHttpReceiver() as r:
        assert _post(r.endpoint, "/v1/logs", request.SerializeToString(),
                     {"Content-Type": "application/x-protobuf"}) == 200
        got = r.requests["logs"][0]["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
        assert got["traceId"] == "0af7651916cd43dd8448eb211c80319c"
        assert got["attributes"] == [{"key": "session.id", "value": {"stringValue": "s1"}}]
        assert r.encodings["logs"] == ["protobuf"]


def test_bad_body_and_unknown_path() -> None:
    with OtlpHttpReceiver() as r:
        assert _post(r.endpoint, "/v1/logs", b"\xff\x00not", {"Content-Type": "application/x-protobuf"}) == 400
        assert _post(r.endpoint, "/v1/logs", b"[1]", {"Content-Type": "application/json"}) == 400
        assert _post(r.endpoint, "/v2/other", b"{}", {"Content-Type": "application/json"}) == 404
        assert r.rejected == 2 and r.requests["logs"] == []
