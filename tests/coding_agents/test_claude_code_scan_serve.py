"""Claude Code's golden logs captures (real CLI, see test_claude_code_cli.py) through
``otel-progress scan`` and ``otel-progress serve``: the same detections, with their evidence
level, on both paths; nothing on the runs where the evidence cannot support a claim."""

from __future__ import annotations

import pytest

from .scan_serve import scan_cli, serve_detections
from .test_claude_code_cli import EXPECTED, SCENARIOS, golden


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_scan_command(scenario: str) -> None:
    status, found = scan_cli(golden(scenario))
    assert [(d["reason"], d["turn"], d["figures"].get("evidence_level")) for d in found] == EXPECTED[scenario]
    assert status == (1 if EXPECTED[scenario] else 0)
    assert all(d["agent"] == "claude-code" and d["tool"] == "Bash" for d in found)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_serve_logs_service(scenario: str) -> None:
    events, marked = serve_detections(golden(scenario))
    expected = EXPECTED[scenario]
    assert [(e["progress.reason"]["stringValue"], int(e["progress.turn"]["intValue"]),
             e.get("progress.evidence_level", {}).get("stringValue")) for e in events] == expected
    assert len(marked) == len(expected)
    for record in marked:  # the offending tool_result record, marked; no raw values added
        assert record["progress.detected"] == {"boolValue": True}
        assert record["tool_name"] == {"stringValue": "Bash"}
