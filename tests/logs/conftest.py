"""Shared helpers of the log-pipeline tests: the golden captures of tests/coding_agents."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parents[1] / "coding_agents" / "golden"
_IDS = ("traceId", "spanId", "parentSpanId")


def golden(name: str) -> Path:
    """A golden OTLP/JSON logs file (captured from the real CLI by tests/coding_agents)."""
    path = GOLDEN / name
    assert path.exists(), f"golden file {name} missing"
    return path


def documents(path: Path) -> list[dict[str, Any]]:
    """The export requests of a JSON-lines file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def b64_ids(node: Any) -> Any:
    """OTLP/JSON (hex ids) to protobuf's JSON mapping (base64 ids), for ParseDict."""
    if isinstance(node, dict):
        return {k: (base64.b64encode(bytes.fromhex(v)).decode() if k in _IDS and v else b64_ids(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [b64_ids(v) for v in node]
    return node
