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


# -- settings files, flags, versions (issue 18, "found with the real CLIs") ---------------


def _statuses(env: dict[str, str], cwd: Path) -> dict[str, object]:
    return {s.agent: s for s in agent_statuses({**BASE, **env}, cwd=cwd)}


def test_telemetry_set_only_in_a_settings_file_is_read(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    for folder in (".claude", ".gemini", ".qwen"):
        (home / folder).mkdir(parents=True)
    project.mkdir()
    (home / ".claude" / "settings.json").write_text(json.dumps({"env": {
        "CLAUDE_CODE_ENABLE_TELEMETRY": "1", "OTEL_LOGS_EXPORTER": "otlp", "OTEL_LOG_TOOL_DETAILS": "1"}}))
    (home / ".gemini" / "settings.json").write_text(json.dumps({"telemetry": {"enabled": True, "traces": True}}))
    (home / ".qwen" / "settings.json").write_text(json.dumps({"telemetry": {"enabled": True}}))
    found = _statuses({"HOME": str(home)}, project)
    assert {k: (s.level, s.configured) for k, s in found.items()} == {
        "Claude Code": ("arguments", True), "Gemini CLI": ("full", True), "Qwen Code": ("arguments", True)}
    # the project's files win over the user's; Claude Code's settings env over the environment
    (project / ".qwen").mkdir()
    sensitive = {"telemetry": {"includeSensitiveSpanAttributes": True}}
    (project / ".qwen" / "settings.json").write_text(json.dumps(sensitive))
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.local.json").write_text(json.dumps({"env": {"OTEL_LOG_TOOL_DETAILS": "0"}}))
    found = _statuses({"HOME": str(home), "OTEL_LOG_TOOL_DETAILS": "1"}, project)
    assert found["Qwen Code"].level == "full" and found["Claude Code"].level == "names"
    # a variable wins over Gemini's and Qwen's settings
    found = _statuses({"HOME": str(home), "GEMINI_TELEMETRY_ENABLED": "false"}, project)
    assert found["Gemini CLI"].level == "off"
    assert agent_findings(list(found.values()))  # configured and losing evidence: warnings


def test_gemini_and_qwen_take_only_true_or_1_as_on(tmp_path: Path) -> None:
    for value, level in (("yes", "off"), ("on", "off"), ("TRUE", "off"), ("", "off"), ("1", "arguments"),
                         ("true", "arguments")):
        found = _statuses({"GEMINI_TELEMETRY_ENABLED": value, "QWEN_TELEMETRY_ENABLED": value}, tmp_path)
        assert (found["Gemini CLI"].level, found["Qwen Code"].level) == (level, level), value
    off = _statuses({"GEMINI_TELEMETRY_ENABLED": "yes"}, tmp_path)["Gemini CLI"]
    assert "only true or 1" in off.detail
    prompts_off = _statuses({"GEMINI_TELEMETRY_ENABLED": "true", "GEMINI_TELEMETRY_LOG_PROMPTS": "false"}, tmp_path)
    assert "no exit code" in prompts_off["Gemini CLI"].detail


def test_the_installed_version_is_checked_against_what_each_version_emits(tmp_path: Path) -> None:
    from otel_progress.doctor.coding_agents import _version_note, installed_version

    package = tmp_path / "node_modules" / "@anthropic-ai" / "claude-code"
    (package / "bin").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "@anthropic-ai/claude-code", "version": "2.1.197"}))
    binary = package / "bin" / "claude.exe"
    binary.write_text("#!/bin/sh\nexit 3\n")
    binary.chmod(0o755)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "claude").symlink_to(binary)
    assert installed_version(str(bindir / "claude"), "@anthropic-ai/claude-code") == "2.1.197"
    (status,) = agent_statuses({"PATH": str(bindir), **CLAUDE_ON}, cwd=tmp_path)
    assert status.version == "2.1.197" and "without gen_ai.operation.name" in status.version_note
    notes = [f for f in agent_findings([status]) if f.severity == "info"]
    assert notes and "2.1.197" in notes[0].message
    # no beta traces before 2.0.20: full detection is not possible there, whatever the settings
    full = {**CLAUDE_ON, "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA": "1", "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_LOG_TOOL_DETAILS": "1", "OTEL_LOG_TOOL_CONTENT": "1"}
    from otel_progress.doctor.coding_agents import _claude_code
    assert _claude_code(full, {}, (2, 0, 15))[0] == "arguments"
    assert _claude_code(full, {}, (2, 1, 332))[0] == "full"
    # before 2.1.101 the beta traces carried the tool content without OTEL_LOG_TOOL_CONTENT
    assert _claude_code({**full, "OTEL_LOG_TOOL_CONTENT": "0"}, {}, (2, 1, 50))[0] == "full"
    assert _claude_code({**full, "OTEL_LOG_TOOL_CONTENT": "0"}, {}, (2, 1, 197))[0] == "arguments"
    assert _version_note("Claude Code", (2, 1, 332)) == "2.1.332: tested"
    assert "newer than the versions tested" in _version_note("Gemini CLI", (0, 70, 0))
    # a binary without a package.json: its --version, else nothing (never an error)
    bare = tmp_path / "codex"
    bare.write_text("#!/bin/sh\necho 'codex-cli 0.171.0'\n")
    bare.chmod(0o755)
    assert installed_version(str(bare)) == "0.171.0"
    assert installed_version(str(tmp_path / "missing")) is None


def test_a_coding_cli_user_is_never_told_to_set_otel_logs_exporter_none() -> None:
    from otel_progress.doctor.checks import environment_findings

    probe = {"opentelemetry_instrument": "/x", "configurators": ["c"], "instrumentors": [{"name": "progress",
             "status": "loads"}], "exporters": {"traces": [], "metrics": [], "logs": []},
             "environment": {"OTEL_LOGS_EXPORTER": "otlp", "OTEL_TRACES_EXPORTER": "otlp",
                             "OTEL_METRICS_EXPORTER": "none"}}
    plain = [f.fix for f in environment_findings(probe) if "OTEL_LOGS_EXPORTER" in f.message]
    assert plain and "OTEL_LOGS_EXPORTER=none" in plain[0]
    statuses = agent_statuses({**BASE, **CLAUDE_ON})
    from otel_progress.doctor.coding_agents import cli_exporter_signals
    for_cli = [f.fix for f in environment_findings(probe, cli_exporter_signals(statuses))
               if f.topic == "sdk" and "EXPORTER" in f.message]
    assert for_cli and all("=none" not in fix for fix in for_cli), for_cli
    assert all("opentelemetry-exporter-otlp" in fix for fix in for_cli)


def test_doctor_says_whether_each_agents_compactions_are_visible(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text('[otel]\nexporter = "otlp-http"\n')
    env = {"HOME": str(home), "CODEX_HOME": str(home / ".codex"), **CLAUDE_ON, "GEMINI_TELEMETRY_ENABLED": "true",
           "QWEN_TELEMETRY_ENABLED": "true"}
    got = {s.agent: s.compaction for s in agent_statuses({**BASE, **env}, cwd=tmp_path)}
    assert got["Claude Code"].startswith("visible: claude_code.compaction")
    assert got["Gemini CLI"].startswith("visible: gemini_cli.chat_compression")
    assert got["Codex CLI"].startswith("not visible") and "compaction_livelock cannot fire" in got["Codex CLI"]
    assert got["Qwen Code"].startswith("not read")
    traces_only = {"CLAUDE_CODE_ENABLE_TELEMETRY": "1", "OTEL_TRACES_EXPORTER": "otlp"}
    (claude,) = agent_statuses({**BASE, "HOME": str(home), **traces_only}, cwd=tmp_path)[:1]
    assert "beta traces only" in claude.compaction and "OTEL_LOGS_EXPORTER=otlp" in claude.compaction
    (off,) = agent_statuses({**BASE, "CLAUDE_CODE_ENABLE_TELEMETRY": "0"}, cwd=tmp_path)
    assert off.compaction.startswith("not visible: no telemetry")
    text = doctor(env=clean_env(**CLAUDE_ON)).stdout
    assert "compactions: visible: claude_code.compaction" in text
