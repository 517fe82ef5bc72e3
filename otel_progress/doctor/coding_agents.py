"""The doctor's coding-agents section: for each coding CLI whose telemetry otel-progress
reads (docs/coding-agents.md), which evidence level the environment's settings give, what
is lost at that level, and the settings that give more.

The CLIs are not Python programs, so this reads the doctor's own environment (the one the
agent would be started from), not the probe's. An agent is listed when its binary is on
``PATH`` or one of its telemetry settings is set; a finding (a warning) is made only when
its telemetry is enabled and the settings in effect lose evidence, so a machine that merely
has a CLI installed is not reported as having a problem.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .checks import WARNING, Finding

__all__ = ["AGENTS", "AgentStatus", "CodingAgent", "agent_findings", "agent_statuses"]

FULL, ARGUMENTS, NAMES, OFF = "full", "arguments", "names", "off"

#: What each level leaves out, for the report.
LOST = {
    FULL: "nothing: every signal applies",
    ARGUMENTS: ("results are only a size, so no repeat cycle, no-progress count or livelock is claimed from"
                " them; caught: the identical request repeated (frequency), identical failing requests and"
                " recurring errors, marked progress.evidence_level=arguments"),
    NAMES: "arguments and results are unknown: only recurring errors are caught (progress.evidence_level=names)",
    OFF: "no telemetry is exported: nothing can be detected",
}


def _on(env: Mapping[str, str], key: str) -> bool:
    return env.get(key, "").strip().lower() in ("1", "true", "yes", "on")


def _exporter(env: Mapping[str, str], signal: str) -> bool:
    return env.get(f"OTEL_{signal}_EXPORTER", "").strip().lower() not in ("", "none")


@dataclass(frozen=True, slots=True)
class CodingAgent:
    """One coding CLI: its name, binaries, the variables that show it is configured, how
    the environment's settings map to an evidence level, and the settings for the best
    level (``fix``)."""

    name: str
    binaries: tuple[str, ...]
    variables: tuple[str, ...]
    level: Callable[[Mapping[str, str]], tuple[str, str]]  # -> (level, what set it)
    fix: str


@dataclass(frozen=True, slots=True)
class AgentStatus:
    """The evidence level an agent's telemetry gives in this environment."""

    agent: str
    level: str
    detail: str
    lost: str
    fix: str
    installed: bool
    configured: bool

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _claude_code(env: Mapping[str, str]) -> tuple[str, str]:
    if not _on(env, "CLAUDE_CODE_ENABLE_TELEMETRY") or not (_exporter(env, "LOGS") or _exporter(env, "TRACES")):
        return OFF, "CLAUDE_CODE_ENABLE_TELEMETRY=1 and OTEL_LOGS_EXPORTER=otlp are not both set"
    if (_on(env, "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA") and _exporter(env, "TRACES")
            and _on(env, "OTEL_LOG_TOOL_CONTENT")):
        return FULL, "beta traces with OTEL_LOG_TOOL_CONTENT=1: the tool.output event has each call's output"
    if _on(env, "OTEL_LOG_TOOL_DETAILS"):
        return ARGUMENTS, "OTEL_LOG_TOOL_DETAILS=1: tool_result logs carry the arguments, the result only as a size"
    return NAMES, "tool_result logs without OTEL_LOG_TOOL_DETAILS: tool names, success and sizes only"


def _qwen_code(env: Mapping[str, str]) -> tuple[str, str]:
    enabled = env.get("QWEN_TELEMETRY_ENABLED", "").strip().lower()
    if enabled in ("0", "false", "no", "off"):
        return OFF, "QWEN_TELEMETRY_ENABLED is off"
    if not enabled:
        return OFF, "QWEN_TELEMETRY_ENABLED is not set (telemetry.enabled in .qwen/settings.json also turns it on)"
    if _on(env, "QWEN_TELEMETRY_INCLUDE_SENSITIVE_SPAN_ATTRIBUTES"):
        return FULL, "sensitive span attributes on: qwen-code.tool spans carry arguments and results"
    return ARGUMENTS, "qwen-code.tool_call logs carry the arguments, the result only as a length"


def _settings_file(path: Path, parse: Callable[[str], Any]) -> Mapping[str, Any]:
    """A CLI's settings file, decoded; ``{}`` when absent, unreadable or invalid."""
    try:
        if path.stat().st_size > 1024 * 1024:
            return {}
        data = parse(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, Mapping) else {}


def _codex(env: Mapping[str, str]) -> tuple[str, str]:
    home = env.get("CODEX_HOME") or (str(Path(env["HOME"]) / ".codex") if env.get("HOME") else "")
    if not home:
        return OFF, "neither CODEX_HOME nor HOME is set: no config.toml to read"
    config = Path(home) / "config.toml"
    otel = _settings_file(config, tomllib.loads).get("otel")
    exporter = otel.get("exporter") if isinstance(otel, Mapping) else None
    if not exporter or exporter == "none":
        return OFF, f"no [otel] exporter in {config}"
    return FULL, ("[otel] exporter set: codex.tool_result logs carry the arguments and a 2 KiB output preview"
                  " (a longer output is a truncated preview: arguments evidence for that call)")


def _flag(env: Mapping[str, str], key: str, setting: Any) -> bool | None:
    value = env.get(key, "").strip().lower()
    if value:
        return value in ("1", "true", "yes", "on")
    return setting if isinstance(setting, bool) else None


def _gemini_cli(env: Mapping[str, str]) -> tuple[str, str]:
    settings: Mapping[str, Any] = {}
    if env.get("HOME"):
        settings = _settings_file(Path(env["HOME"]) / ".gemini" / "settings.json", json.loads)
    telemetry = settings.get("telemetry")
    telemetry = telemetry if isinstance(telemetry, Mapping) else {}
    if not _flag(env, "GEMINI_TELEMETRY_ENABLED", telemetry.get("enabled")):
        return OFF, "GEMINI_TELEMETRY_ENABLED (telemetry.enabled in ~/.gemini/settings.json) is not on"
    if _flag(env, "GEMINI_TELEMETRY_LOG_PROMPTS", telemetry.get("logPrompts")) is False:
        return NAMES, "logPrompts off: gemini_cli.tool_call logs have no function_args, tool_call spans no content"
    if _flag(env, "GEMINI_TELEMETRY_TRACES_ENABLED", telemetry.get("traces")):
        return FULL, "traces on: each tool_call span carries the call's response (values cut at 10,000 characters)"
    return ARGUMENTS, "gemini_cli.tool_call logs carry the arguments, the result only as content_length"


#: The coding agents the doctor knows, in the order they are reported.
AGENTS: tuple[CodingAgent, ...] = (
    CodingAgent("Claude Code", ("claude",), ("CLAUDE_CODE_ENABLE_TELEMETRY", "OTEL_LOG_TOOL_DETAILS",
                                             "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA"), _claude_code,
                "CLAUDE_CODE_ENABLE_TELEMETRY=1 OTEL_LOGS_EXPORTER=otlp OTEL_LOG_TOOL_DETAILS=1 (arguments);"
                " for full detection also CLAUDE_CODE_ENHANCED_TELEMETRY_BETA=1 OTEL_TRACES_EXPORTER=otlp"
                " OTEL_LOG_TOOL_CONTENT=1"),
    CodingAgent("Codex CLI", ("codex",), ("CODEX_HOME",), _codex,
                "[otel] exporter = { otlp-http = { endpoint = \"…/v1/logs\", protocol = \"json\" } } in"
                " $CODEX_HOME/config.toml (or ~/.codex/config.toml)"),
    CodingAgent("Gemini CLI", ("gemini",), ("GEMINI_TELEMETRY_ENABLED", "GEMINI_TELEMETRY_OTLP_ENDPOINT",
                                            "GEMINI_TELEMETRY_TRACES_ENABLED", "GEMINI_TELEMETRY_LOG_PROMPTS"),
                _gemini_cli,
                "GEMINI_TELEMETRY_ENABLED=true GEMINI_TELEMETRY_OTLP_ENDPOINT=… (arguments); for full detection"
                " also GEMINI_TELEMETRY_TRACES_ENABLED=true, with logPrompts left on"),
    CodingAgent("Qwen Code", ("qwen",), ("QWEN_TELEMETRY_ENABLED", "QWEN_TELEMETRY_OTLP_ENDPOINT"), _qwen_code,
                "QWEN_TELEMETRY_ENABLED=true QWEN_TELEMETRY_OTLP_ENDPOINT=… (arguments); for full detection"
                " also QWEN_TELEMETRY_INCLUDE_SENSITIVE_SPAN_ATTRIBUTES=true"),
)


def agent_statuses(environ: Mapping[str, str]) -> list[AgentStatus]:
    """The agents present in ``environ`` (binary on its ``PATH``, or a setting of theirs
    set) and the evidence level their settings give."""
    out: list[AgentStatus] = []
    path = environ.get("PATH")
    for agent in AGENTS:
        installed = any(shutil.which(b, path=path) for b in agent.binaries) if path else False
        configured = any(v in environ for v in agent.variables)
        if not (installed or configured):
            continue
        level, detail = agent.level(environ)
        out.append(AgentStatus(agent.name, level, detail, LOST[level], "" if level == FULL else agent.fix,
                               installed, configured))
    return out


def agent_findings(statuses: list[AgentStatus]) -> list[Finding]:
    """Warnings for agents whose telemetry is configured but loses evidence."""
    return [Finding(WARNING, "coding-agents", f"{s.agent}: evidence level {s.level} ({s.detail}); {s.lost}", s.fix)
            for s in statuses if s.configured and s.level != FULL]
