"""The doctor's coding-agents rows for Codex CLI (its ``[otel]`` table in
``$CODEX_HOME/config.toml``) and Gemini CLI (``GEMINI_TELEMETRY_*`` over
``~/.gemini/settings.json``): the evidence level their settings give."""

from __future__ import annotations

import json
from pathlib import Path

from otel_progress.doctor.coding_agents import agent_findings, agent_statuses

BASE = {"PATH": "/usr/bin:/bin"}


def _level(env: dict[str, str], agent: str) -> str:
    return {s.agent: s.level for s in agent_statuses({**BASE, **env})}[agent]


def test_codex_is_full_with_an_otel_exporter_and_off_without(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[otel]\nexporter = { otlp-http = { endpoint = "http://127.0.0.1:4318/v1/logs", protocol = "json" } }\n')
    assert _level({"CODEX_HOME": str(tmp_path)}, "Codex CLI") == "full"
    (tmp_path / "config.toml").write_text('model = "gpt-5"\n[otel]\nexporter = "none"\n')
    assert _level({"CODEX_HOME": str(tmp_path)}, "Codex CLI") == "off"
    (tmp_path / "config.toml").write_text("[otel\nbroken")
    assert _level({"CODEX_HOME": str(tmp_path)}, "Codex CLI") == "off"
    statuses = agent_statuses({**BASE, "CODEX_HOME": str(tmp_path / "missing")})
    assert [(s.agent, s.level) for s in statuses] == [("Codex CLI", "off")]
    assert "[otel] exporter" in agent_findings(statuses)[0].fix


def test_gemini_levels_follow_its_settings_file_and_environment(tmp_path: Path) -> None:
    home = {"HOME": str(tmp_path)}
    assert _level({**home, "GEMINI_TELEMETRY_ENABLED": "true"}, "Gemini CLI") == "arguments"
    assert _level({**home, "GEMINI_TELEMETRY_ENABLED": "true", "GEMINI_TELEMETRY_TRACES_ENABLED": "true"},
                  "Gemini CLI") == "full"
    assert _level({**home, "GEMINI_TELEMETRY_ENABLED": "true", "GEMINI_TELEMETRY_TRACES_ENABLED": "true",
                   "GEMINI_TELEMETRY_LOG_PROMPTS": "false"}, "Gemini CLI") == "names"
    assert _level({**home, "GEMINI_TELEMETRY_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "Gemini CLI") == "off"
    (tmp_path / ".gemini").mkdir()
    (tmp_path / ".gemini" / "settings.json").write_text(json.dumps({"telemetry": {"enabled": True, "traces": True}}))
    assert _level({**home, "GEMINI_TELEMETRY_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "Gemini CLI") == "full"
    assert _level({**home, "GEMINI_TELEMETRY_ENABLED": "false"}, "Gemini CLI") == "off"  # the variable wins
    findings = agent_findings(agent_statuses({**BASE, **home, "GEMINI_TELEMETRY_TRACES_ENABLED": "false"}))
    assert [f.message.split(":")[0] for f in findings] == ["Gemini CLI"]
    assert "GEMINI_TELEMETRY_TRACES_ENABLED=true" in findings[0].fix
