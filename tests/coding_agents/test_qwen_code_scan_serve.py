"""Qwen Code's golden logs captures (real CLI, see test_qwen_code_cli.py) through
``otel-progress scan`` and ``otel-progress serve``: the detections the reader and the engine
find (reason, turn, evidence level) on both paths."""

from __future__ import annotations

import pytest

from .cli_capture import brief
from .scan_serve import scan_cli, serve_detections
from .test_qwen_code_cli import EXPECTED_LOGS, SCENARIOS, golden


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_scan_command_and_serve_agree_with_the_engine(scenario: str) -> None:
    path = golden(scenario)
    expected = brief(path)
    assert [(r, level) for r, _, level in expected] == [(r, level) for r, _, level in EXPECTED_LOGS[scenario]]
    status, found = scan_cli(path)
    assert [(d["reason"], d["turn"], d["figures"].get("evidence_level")) for d in found] == expected
    assert status == (1 if expected else 0)
    assert all(d["agent"] == "qwen-code" for d in found)
    events, marked = serve_detections(path)
    assert [(e["progress.reason"]["stringValue"], int(e["progress.turn"]["intValue"]),
             e.get("progress.evidence_level", {}).get("stringValue")) for e in events] == expected
    assert len(marked) == len(expected)
    assert all("function_name" in record for record in marked)
