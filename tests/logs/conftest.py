"""Shared helpers of the log-pipeline tests: the golden captures of tests/coding_agents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parents[1] / "coding_agents" / "golden"


def golden(name: str) -> Path:
    """A golden OTLP/JSON logs file (captured from the real CLI by tests/coding_agents)."""
    path = GOLDEN / name
    assert path.exists(), f"golden file {name} missing"
    return path


def documents(path: Path) -> list[dict[str, Any]]:
    """The export requests of a JSON-lines file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
