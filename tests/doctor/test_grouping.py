"""doctor on a client whose tool calls have no agent span: each call alone in a trace and
naming no conversation is a run of its own, and doctor says which attribute makes
grouping exact; once the client names its conversation the loop is caught and nothing is
said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_progress.doctor.grouping import grouping_findings

from .conftest import BIN, clean_env, doctor

CLIENT = Path(__file__).resolve().parent / "scripts" / "mcp_client_calls.py"

pytestmark = pytest.mark.timeout(300)


def _rows(n: int, traces: int, keys: list[str]) -> dict:
    return {"tools": [{"trace_id": f"t{i % traces}", "attribute_keys": keys} for i in range(n)]}


def _spans(n: int, *, parent: str = "", conversation: bool = False, every_s: float = 1.0) -> dict:
    """Report rows of ``n`` tool spans, each in a trace of its own, as the watcher writes them."""
    return {"tools": [{"trace_id": f"t{i}", "attribute_keys": ["traceloop.span.kind"], "parent_id": parent,
                       "end_ns": int(i * every_s * 1e9), "names_conversation": conversation} for i in range(n)]}


def test_the_check() -> None:
    assert grouping_findings(None) == [] and grouping_findings(_rows(1, 1, [])) == []
    (finding,) = grouping_findings(_rows(5, 5, ["traceloop.span.kind"]))
    assert finding.topic == "grouping" and "gen_ai.conversation.id" in finding.fix
    assert grouping_findings(_rows(5, 5, ["gen_ai.conversation.id"])) == []  # named: grouped
    assert grouping_findings(_rows(5, 1, [])) == []  # one trace: one run


def test_the_check_is_the_run_time_condition() -> None:
    """The processor's and serve's condition (otel_progress.runs.ungrouped): 3 root tool
    spans naming no conversation within 5 minutes; the fix names both ways out."""
    (finding,) = grouping_findings(_spans(3))
    assert "gen_ai.conversation.id" in finding.fix and "invoke_agent" in finding.fix
    assert grouping_findings(_spans(2)) == []  # two calls: not yet a set-up that cannot form runs
    assert grouping_findings(_spans(5, parent="00000000000000a1")) == []  # under a parent: one run per trace
    assert grouping_findings(_spans(5, conversation=True)) == []  # named: grouped
    assert grouping_findings(_spans(3, every_s=200.0)) == []  # never three within five minutes


def test_doctor_says_which_attribute_groups_root_tool_calls() -> None:
    proc = doctor("--format", "json", "--timeout", "120", "--", str(BIN / "python"), str(CLIENT), env=clean_env())
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    assert report["run"]["tool_spans"] == 5 and report["run"]["detections"] == []
    (finding,) = [f for f in report["findings"] if f["topic"] == "grouping"]
    assert "alone in a trace of its own" in finding["message"] and "gen_ai.conversation.id" in finding["fix"]
    assert proc.returncode == 1

    named = doctor("--format", "json", "--timeout", "120", "--", str(BIN / "python"), str(CLIENT),
                   "--conversation", "support-1", env=clean_env())
    report = json.loads(named.stdout)
    assert report["run"]["detections"], report["findings"]
    assert not [f for f in report["findings"] if f["topic"] == "grouping"]
