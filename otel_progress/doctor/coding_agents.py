"""The doctor's coding-agents section: for each coding CLI whose telemetry otel-progress
reads (docs/coding-agents.md), which evidence level the environment's settings give, what
is lost at that level, and the settings that give more.

The CLIs are not Python programs, so this reads the doctor's own environment (the one the
agent would be started from), not the probe's, and each CLI's own settings files the way
the CLI does (``~/.claude/settings.json`` and the project's ``.claude/settings.json`` /
``settings.local.json``, whose ``env`` Claude Code copies over its environment;
``telemetry`` in ``~/.gemini/settings.json`` / ``~/.qwen/settings.json`` and the project's
``.gemini/`` / ``.qwen/``, which a variable overrides; Gemini CLI and Qwen Code take only
``true`` or ``1`` as on). An agent is listed when its binary is on ``PATH`` or one of its
telemetry settings is set; a finding (a warning) is made only when its telemetry is enabled
and the settings in effect lose evidence, so a machine that merely has a CLI installed is
not reported as having a problem. The installed CLI's version (its npm ``package.json``,
else ``--version``) is checked against what each version emits (:data:`VERSION_NOTES`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .checks import INFO, WARNING, Finding

__all__ = ["AGENTS", "VERSION_NOTES", "AgentStatus", "CodingAgent", "agent_findings", "agent_statuses",
           "cli_exporter_signals", "installed_version"]

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


Version = tuple[int, ...]


def _version(text: str | None) -> Version | None:
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", text or "")
    return tuple(int(x) for x in match.groups()) if match else None


def _on(env: Mapping[str, str], key: str) -> bool:
    return env.get(key, "").strip().lower() in ("1", "true", "yes", "on")


def _strict(env: Mapping[str, str], key: str, setting: Any = None) -> bool | None:
    """A Gemini CLI / Qwen Code flag: a variable that is set is on only when it is exactly
    ``true`` or ``1`` (``parseBooleanEnvFlag``: ``yes`` and an empty value are off), else the
    setting's boolean; ``None`` when neither says."""
    if key in env:
        return env[key] in ("true", "1")
    return setting if isinstance(setting, bool) else None


def _exporter(env: Mapping[str, str], signal: str) -> bool:
    return env.get(f"OTEL_{signal}_EXPORTER", "").strip().lower() not in ("", "none")


@dataclass(frozen=True, slots=True)
class CodingAgent:
    """One coding CLI: its name, binaries, the variables that show it is configured, how
    the effective settings map to an evidence level, the settings for the best level
    (``fix``), its npm package and where its settings files are."""

    name: str
    binaries: tuple[str, ...]
    variables: tuple[str, ...]
    level: Callable[[Mapping[str, str], Mapping[str, Any], Version | None], tuple[str, str]]
    fix: str
    package: str = ""
    settings: Callable[[Mapping[str, str], Path], Mapping[str, Any]] = lambda env, cwd: {}


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
    version: str | None = None
    version_note: str = ""
    #: whether this agent's compactions reach otel-progress with these settings, and how
    compaction: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _settings_file(path: Path, parse: Callable[[str], Any]) -> Mapping[str, Any]:
    """A CLI's settings file, decoded; ``{}`` when absent, unreadable or invalid."""
    try:
        if path.stat().st_size > 1024 * 1024:
            return {}
        data = parse(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, Mapping) else {}


def _home(env: Mapping[str, str]) -> Path | None:
    return Path(env["HOME"]) if env.get("HOME") else None


def _claude_settings(env: Mapping[str, str], cwd: Path) -> Mapping[str, Any]:
    """The ``env`` of Claude Code's settings files, user then project (later ones win), as
    Claude Code copies them over its environment."""
    out: dict[str, str] = {}
    home = _home(env)
    paths = ([home / ".claude" / "settings.json"] if home else []) + [
        cwd / ".claude" / "settings.json", cwd / ".claude" / "settings.local.json"]
    for path in paths:
        values = _settings_file(path, json.loads).get("env")
        if isinstance(values, Mapping):
            out.update({str(k): str(v) for k, v in values.items() if isinstance(v, (str, int, float, bool))})
    return {"env": out} if out else {}


def _telemetry_settings(folder: str) -> Callable[[Mapping[str, str], Path], Mapping[str, Any]]:
    def read(env: Mapping[str, str], cwd: Path) -> Mapping[str, Any]:
        """``telemetry`` of the user's then the project's settings file (the project wins)."""
        merged: dict[str, Any] = {}
        home = _home(env)
        for path in ([home / folder / "settings.json"] if home else []) + [cwd / folder / "settings.json"]:
            telemetry = _settings_file(path, json.loads).get("telemetry")
            if isinstance(telemetry, Mapping):
                merged.update(telemetry)
        return {"telemetry": merged} if merged else {}
    return read


def _claude_code(env: Mapping[str, str], settings: Mapping[str, Any], version: Version | None) -> tuple[str, str]:
    env = {**env, **(settings.get("env") or {})}  # Claude Code's settings env wins
    if not _on(env, "CLAUDE_CODE_ENABLE_TELEMETRY") or not (_exporter(env, "LOGS") or _exporter(env, "TRACES")):
        return OFF, "CLAUDE_CODE_ENABLE_TELEMETRY=1 and OTEL_LOGS_EXPORTER=otlp are not both set"
    beta = _on(env, "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA") and _exporter(env, "TRACES")
    traced = version is None or version >= _CLAUDE_TRACES
    content = _on(env, "OTEL_LOG_TOOL_CONTENT") or (version is not None and version < _CLAUDE_CONTENT_GATED)
    if beta and traced and content:
        return FULL, "beta traces with the tool content: the tool.output event has each call's output"
    if _on(env, "OTEL_LOG_TOOL_DETAILS"):
        why = (" (this version has no beta traces)" if beta and not traced else "")
        return ARGUMENTS, ("OTEL_LOG_TOOL_DETAILS=1: tool_result logs carry the arguments, the result only as a"
                           f" size{why}")
    return NAMES, "tool_result logs without OTEL_LOG_TOOL_DETAILS: tool names, success and sizes only"


def _qwen_code(env: Mapping[str, str], settings: Mapping[str, Any], version: Version | None) -> tuple[str, str]:
    telemetry = settings.get("telemetry") or {}
    enabled = _strict(env, "QWEN_TELEMETRY_ENABLED", telemetry.get("enabled"))
    if not enabled:
        raw = env.get("QWEN_TELEMETRY_ENABLED")
        why = (f"QWEN_TELEMETRY_ENABLED={raw!r} is off (only true or 1 turn it on)" if raw is not None
               else "QWEN_TELEMETRY_ENABLED is not set and telemetry.enabled in .qwen/settings.json is not true")
        return OFF, why
    sensitive = telemetry.get("includeSensitiveSpanAttributes")
    if _strict(env, "QWEN_TELEMETRY_INCLUDE_SENSITIVE_SPAN_ATTRIBUTES", sensitive):
        return FULL, "sensitive span attributes on: qwen-code.tool spans carry arguments and results"
    return ARGUMENTS, "qwen-code.tool_call logs carry the arguments, the result only as a length"


def _codex(env: Mapping[str, str], settings: Mapping[str, Any], version: Version | None) -> tuple[str, str]:
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


def _gemini_cli(env: Mapping[str, str], settings: Mapping[str, Any], version: Version | None) -> tuple[str, str]:
    telemetry = settings.get("telemetry") or {}
    if not _strict(env, "GEMINI_TELEMETRY_ENABLED", telemetry.get("enabled")):
        raw = env.get("GEMINI_TELEMETRY_ENABLED")
        why = (f"GEMINI_TELEMETRY_ENABLED={raw!r} is off (only true or 1 turn it on)" if raw is not None
               else "GEMINI_TELEMETRY_ENABLED is not set and telemetry.enabled in .gemini/settings.json is not true")
        return OFF, why
    if _strict(env, "GEMINI_TELEMETRY_LOG_PROMPTS", telemetry.get("logPrompts")) is False:
        return NAMES, ("logPrompts off: gemini_cli.tool_call logs have no function_args and no exit code (a"
                       " command exiting nonzero reads as a success), tool_call spans no content")
    if _strict(env, "GEMINI_TELEMETRY_TRACES_ENABLED", telemetry.get("traces")):
        return FULL, "traces on: each tool_call span carries the call's response (values cut at 10,000 characters)"
    return ARGUMENTS, "gemini_cli.tool_call logs carry the arguments, the result only as content_length"


#: Claude Code: the first version with beta traces (2.0.15 has none, 2.0.20 has them).
_CLAUDE_TRACES: Version = (2, 0, 20)
#: Claude Code: from this version the tool.output event needs OTEL_LOG_TOOL_CONTENT=1.
_CLAUDE_CONTENT_GATED: Version = (2, 1, 101)
#: Claude Code: the first version whose spans carry gen_ai.operation.name / gen_ai.tool.name.
_CLAUDE_GENAI_KEYS: Version = (2, 1, 300)

#: Per agent: the versions tested (the coding-agent tests pin them) and what versions
#: differ in, as (below this version, what it emits).
VERSION_NOTES: Mapping[str, tuple[tuple[str, ...], tuple[tuple[Version, str], ...]]] = {
    "Claude Code": (("2.1.332", "2.1.197"), (
        (_CLAUDE_TRACES, "no beta traces (CLAUDE_CODE_ENHANCED_TELEMETRY_BETA): logs only"),
        (_CLAUDE_CONTENT_GATED, "beta traces send the tool.output content without OTEL_LOG_TOOL_CONTENT"),
        (_CLAUDE_GENAI_KEYS, "claude_code.tool spans without gen_ai.operation.name / gen_ai.tool.name (read by"
                             " span.type and tool_name; tokens from input_tokens / output_tokens)"),
    )),
    "Codex CLI": (("0.171.0",), ()),
    "Gemini CLI": (("0.61.0",), ()),
    "Qwen Code": (("0.24.4",), ()),
}


def _compaction(agent: str, env: Mapping[str, str], settings: Mapping[str, Any], level: str) -> str:
    """Whether the agent's compactions are visible with these settings (docs/coding-agents.md,
    *Compaction*): the boundary otel-progress needs for its compaction rules."""
    if level == OFF:
        return "not visible: no telemetry is exported"
    if agent == "Claude Code":
        env = {**env, **(settings.get("env") or {})}
        if _exporter(env, "LOGS"):
            return "visible: claude_code.compaction log events (with every telemetry setting)"
        return ("visible in the beta traces only (the summariser's claude_code.llm_request span); set"
                " OTEL_LOGS_EXPORTER=otlp for the claude_code.compaction log events")
    if agent == "Gemini CLI":
        return "visible: gemini_cli.chat_compression log events (its traces carry no compaction marker)"
    if agent == "Codex CLI":
        return ("not visible: Codex logs no compaction (only the codex.task.compact metric), so a re-read after"
                " one is judged as any re-read and compaction_livelock cannot fire")
    if agent == "Qwen Code":
        return ("not read: qwen-code.chat_compression is logged before Qwen knows whether the summary was used,"
                " so it cannot tell an applied compaction from a failed one")
    return ""


def _version_note(agent: str, version: Version | None) -> str:
    tested, notes = VERSION_NOTES.get(agent, ((), ()))
    if version is None or not tested:
        return ""
    text = ".".join(map(str, version))
    said = [note for below, note in notes if version < below]
    newest = max(_version(t) or () for t in tested)
    if said:
        return f"{text}: " + "; ".join(said)
    if version > newest:
        return f"{text} is newer than the versions tested ({', '.join(tested)}): its shapes were not checked"
    if text in tested:
        return f"{text}: tested"
    return f"{text}: between the shapes listed, not itself tested (tested: {', '.join(tested)})"


def installed_version(binary: str, package: str = "") -> str | None:
    """The version of an installed CLI: its npm ``package.json`` (the binary's own package,
    up to four folders above it), else what ``BINARY --version`` prints (10 s at most)."""
    try:
        path = Path(os.path.realpath(binary))
    except (OSError, ValueError):
        return None
    for folder in list(path.parents)[:4]:
        data = _settings_file(folder / "package.json", json.loads)
        if data.get("version") and (not package or data.get("name") == package
                                    or str(data.get("name", "")).startswith(package + "-")):
            return str(data["version"])
    try:
        done = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=10,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    found = _version(done.stdout)
    return ".".join(map(str, found)) if found else None


#: The coding agents the doctor knows, in the order they are reported.
AGENTS: tuple[CodingAgent, ...] = (
    CodingAgent("Claude Code", ("claude",), ("CLAUDE_CODE_ENABLE_TELEMETRY", "OTEL_LOG_TOOL_DETAILS",
                                             "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA"), _claude_code,
                "CLAUDE_CODE_ENABLE_TELEMETRY=1 OTEL_LOGS_EXPORTER=otlp OTEL_LOG_TOOL_DETAILS=1 (arguments);"
                " for full detection also CLAUDE_CODE_ENHANCED_TELEMETRY_BETA=1 OTEL_TRACES_EXPORTER=otlp"
                " OTEL_LOG_TOOL_CONTENT=1", "@anthropic-ai/claude-code", _claude_settings),
    CodingAgent("Codex CLI", ("codex",), ("CODEX_HOME",), _codex,
                "[otel] exporter = { otlp-http = { endpoint = \"…/v1/logs\", protocol = \"json\" } } in"
                " $CODEX_HOME/config.toml (or ~/.codex/config.toml)", "@openai/codex"),
    CodingAgent("Gemini CLI", ("gemini",), ("GEMINI_TELEMETRY_ENABLED", "GEMINI_TELEMETRY_OTLP_ENDPOINT",
                                            "GEMINI_TELEMETRY_TRACES_ENABLED", "GEMINI_TELEMETRY_LOG_PROMPTS"),
                _gemini_cli,
                "GEMINI_TELEMETRY_ENABLED=true GEMINI_TELEMETRY_OTLP_ENDPOINT=… (arguments); for full detection"
                " also GEMINI_TELEMETRY_TRACES_ENABLED=true, with logPrompts left on", "@google/gemini-cli",
                _telemetry_settings(".gemini")),
    CodingAgent("Qwen Code", ("qwen",), ("QWEN_TELEMETRY_ENABLED", "QWEN_TELEMETRY_OTLP_ENDPOINT"), _qwen_code,
                "QWEN_TELEMETRY_ENABLED=true QWEN_TELEMETRY_OTLP_ENDPOINT=… (arguments); for full detection"
                " also QWEN_TELEMETRY_INCLUDE_SENSITIVE_SPAN_ATTRIBUTES=true", "@qwen-code/qwen-code",
                _telemetry_settings(".qwen")),
)


def agent_statuses(environ: Mapping[str, str], cwd: Path | None = None) -> list[AgentStatus]:
    """The agents present in ``environ`` (binary on its ``PATH``, or a setting of theirs
    set in the environment or in their settings files) and the evidence level their
    settings give; ``cwd``: the project folder whose settings files count (default: the
    current folder)."""
    out: list[AgentStatus] = []
    path = environ.get("PATH")
    folder = cwd if cwd is not None else Path.cwd()
    for agent in AGENTS:
        binary = next((found for b in agent.binaries if (found := shutil.which(b, path=path))), None) if path else None
        settings = agent.settings(environ, folder)
        configured = any(v in environ for v in agent.variables) or bool(settings)
        if not (binary or configured):
            continue
        version = installed_version(binary, agent.package) if binary else None
        parsed = _version(version)
        level, detail = agent.level(environ, settings, parsed)
        out.append(AgentStatus(agent.name, level, detail, LOST[level], "" if level == FULL else agent.fix,
                               binary is not None, configured, version, _version_note(agent.name, parsed),
                               _compaction(agent.name, environ, settings, level)))
    return out


def cli_exporter_signals(statuses: list[AgentStatus]) -> frozenset[str]:
    """The ``OTEL_*_EXPORTER`` signals a configured coding CLI reads from the environment
    (Claude Code's logs and traces): a Python-side fix must never set those to ``none``."""
    if any(s.agent == "Claude Code" and s.configured for s in statuses):
        return frozenset({"logs", "traces"})
    return frozenset()


def agent_findings(statuses: list[AgentStatus]) -> list[Finding]:
    """Warnings for agents whose telemetry is configured but loses evidence."""
    out = [Finding(WARNING, "coding-agents", f"{s.agent}: evidence level {s.level} ({s.detail}); {s.lost}", s.fix)
           for s in statuses if s.configured and s.level != FULL]
    out += [Finding(INFO, "coding-agents", f"{s.agent} {s.version_note}") for s in statuses
            if s.version_note and not s.version_note.endswith(": tested")]
    return out
