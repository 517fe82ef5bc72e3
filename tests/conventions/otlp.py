"""Small OTLP/JSON writers for the convention tests: one span per trace, with a resource."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tests.otlp_builder import attrs

T0 = 1_764_000_000_000_000_000
S = 1_000_000_000


def hex_id(seed: str, size: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[: size * 2]


def root_span_request(seed: str, name: str, attributes: dict[str, Any], resource: dict[str, Any], start: int,
                      status_code: int = 1) -> dict[str, Any]:
    """An ExportTraceServiceRequest holding one root span, alone in its trace."""
    span = {
        "traceId": hex_id("trace:" + seed, 16), "spanId": hex_id("span:" + seed, 8), "parentSpanId": "",
        "name": name, "kind": 3, "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + S // 10),
        "attributes": attrs(attributes), "status": {"code": status_code},
    }
    return {"resourceSpans": [{"resource": {"attributes": attrs(resource)},
                               "scopeSpans": [{"scope": {"name": "test"}, "spans": [span]}]}]}


def write(path: Path, requests: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in requests))
    return path
