"""Shared by the Claude Code and Qwen Code scan/serve tests: a golden logs capture through
``otel-progress scan`` (the command) and through ``otel-progress serve``'s
LogsService/Export (real gRPC on 127.0.0.1, inline mode, forwarding to a real gRPC sink)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub

from ..logs.conftest import b64_ids
from ..logs.test_serve_logs import LogsSink
from .cli_capture import serve

__all__ = ["LogsSink", "scan_cli", "serve_detections"]

_CLI = [str(Path(sys.executable).parent / "otel-progress"), "scan"]


def scan_cli(path: Path) -> tuple[int, list[dict[str, Any]]]:
    """``otel-progress scan PATH``: its exit status and the detections it printed."""
    done = subprocess.run([*_CLI, str(path)], capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def _attrs(record: Any) -> dict[str, Any]:
    return {kv.key: json_format.MessageToDict(kv.value) for kv in record.attributes}


def serve_detections(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Send a logs capture to a fresh ``serve`` (inline, forwarding to a sink); the
    attributes of the detection records and of the records marked ``progress.detected``."""
    sink = LogsSink()
    service = serve(sink.port)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{service.port}") as channel:
            stub = LogsServiceStub(channel)
            for line in path.read_text().splitlines():
                if line.strip():
                    request = json_format.ParseDict(b64_ids(json.loads(line)), ExportLogsServiceRequest(),
                                                    ignore_unknown_fields=True)
                    stub.Export(request, timeout=10)
        records = sink.records()
        events = [_attrs(r) for r in records if r.event_name.startswith("progress.")]
        marked = [_attrs(r) for r in records if not r.event_name.startswith("progress.")
                  and "progress.detected" in _attrs(r)]
        return events, marked
    finally:
        service.stop(grace=0.5)
        sink.server.stop(0)
