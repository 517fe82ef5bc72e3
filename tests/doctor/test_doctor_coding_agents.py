"""The doctor's coding-agents section (otel_progress/doctor/coding_agents.py): the evidence
level each coding CLI's settings give, what is lost, and the settings that give more. One
real ``otel-progress doctor`` run; the level table through the module itself."""

from __future__ import annotations

import json
import os
from pathlib import Path

from otel_progress.doctor.coding_agents import agent_findings, agent_statuses
from tests.coding_agents.test_claude_code_cli import claude_binary

from .conftest import clean_env, doctor

BASE = {"PATH": "/usr/bin:/bin"}
CLAUDE_ON = {"CLAUDE_CODE_ENABLE_TELEMETRY": "1", "OTEL_LOGS_EXPORTER": "otlp"}


def _levels(env: dict[str, str]) -> dict[str, str]:
    return {s.agent: s.level for s in agent_statuses({**BASE, **env})}


def test_claude_code_levels_follow_its_settings() -> None:
    assert _levels(CLAUDE_ON) == {"Claude Code": "names"}
    assert _levels({**CLAUDE_ON, "OTEL_LOG_TOOL_DETAILS": "1"}) == {"Claude Code": "arguments"}
    assert _levels({**CLAUDE_ON, "OTEL_LOG_TOOL_DETAILS": "1", "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA": "1",
                    "OTEL_TRACES_EXPORTER": "otlp", "OTEL_LOG_TOOL_CONTENT": "1"}) == {"Claude Code": "full"}
    assert _levels({"CLAUDE_CODE_ENABLE_TELEMETRY": "0"}) == {"Claude Code": "off"}


def test_qwen_code_levels_follow_its_settings() -> None:
    assert _levels({"QWEN_TELEMETRY_ENABLED": "true"}) == {"Qwen Code": "arguments"}
    assert _levels({"QWEN_TELEMETRY_ENABLED": "true",
                    "QWEN_TELEMETRY_INCLUDE_SENSITIVE_SPAN_ATTRIBUTES": "true"}) == {"Qwen Code": "full"}
    assert _levels({"QWEN_TELEMETRY_OTLP_ENDPOINT": "http://127.0.0.1:4318"})["Qwen Code"] == "off"


def test_findings_only_for_configured_agents_that_lose_evidence() -> None:
    statuses = agent_statuses({**BASE, **CLAUDE_ON, "QWEN_TELEMETRY_ENABLED": "true",
                               "QWEN_TELEMETRY_INCLUDE_SENSITIVE_SPAN_ATTRIBUTES": "true"})
    findings = agent_findings(statuses)
    assert [f.topic for f in findings] == ["coding-agents"]
    assert findings[0].message.startswith("Claude Code: evidence level names")
    assert "OTEL_LOG_TOOL_DETAILS=1" in findings[0].fix
    assert agent_statuses(BASE) == []  # neither installed nor configured: not listed


def test_an_installed_but_unconfigured_cli_is_listed_without_a_finding(tmp_path: Path) -> None:
    # the real CLI, installed from npm (once, cached) by the coding-agent tests' installer
    (tmp_path / "claude").symlink_to(claude_binary())
    statuses = agent_statuses({"PATH": f"{tmp_path}{os.pathsep}/usr/bin"})
    assert [(s.agent, s.level, s.installed, s.configured) for s in statuses] == [("Claude Code", "off", True, False)]
    assert agent_findings(statuses) == []


def test_doctor_reports_the_section_and_the_finding() -> None:
    env = clean_env(**CLAUDE_ON, OTEL_EXPORTER_OTLP_PROTOCOL="http/json")
    proc = doctor("--format", "json", env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    (row,) = [a for a in report["coding_agents"] if a["agent"] == "Claude Code"]
    assert row["level"] == "names" and "OTEL_LOG_TOOL_DETAILS=1" in row["fix"]
    assert any(f["topic"] == "coding-agents" for f in report["findings"])
    assert proc.returncode == 1
    text = doctor(env=env).stdout
    assert "Coding agents" in text and "names     Claude Code" in text
