"""Coding agents (Claude Code, Codex CLI, Gemini CLI, Qwen Code): readers of their OTLP
logs, and the real CLIs run against scripted model APIs."""
