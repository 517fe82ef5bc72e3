"""``otel-progress doctor``: tell the user why nothing can be detected.

``otel-progress doctor`` examines the environment it runs in (or the interpreter of the
command given after ``--``): which OpenTelemetry instrumentors ``opentelemetry-instrument``
would load and which it would skip or fail on, what the content-capture settings in effect
mean for each installed instrumentation (:mod:`otel_progress.conventions.content_settings`), and
whether the progress processor will be installed. ``otel-progress doctor -- COMMAND`` then
runs the command under ``opentelemetry-instrument`` with the progress processor and a
watcher (:mod:`.watch`), and reports how many tool spans the run produced, how many
carried content, and what was detected. See docs/doctor.md.

The package: :mod:`.probe` (the environment probe, run in the examined interpreter),
:mod:`.watch` (inside the watched run), :mod:`.checks` (the findings), :mod:`.render`
(text and JSON output); this module runs them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._names import ENV_CHAINED_HOOK, ENV_REPORT, HOOK
from .checks import ERROR, WARNING, Finding, content_statuses, environment_findings, run_findings
from .coding_agents import AgentStatus, agent_findings, agent_statuses, cli_exporter_signals
from .grouping import grouping_findings
from .probe import MARKER

__all__ = ["EXIT_OK", "EXIT_PROBLEMS", "EXIT_USAGE", "DoctorReport", "Finding", "add_arguments", "diagnose", "run"]

#: Exit status: nothing wrong was found.
EXIT_OK = 0
#: Exit status: at least one error or warning (detection cannot work, or is degraded).
EXIT_PROBLEMS = 1
#: Exit status: bad usage, or the examined interpreter or the command could not be run.
EXIT_USAGE = 2

PROBE_TIMEOUT_S = 120.0
_ENV_HOOK = "OTEL_PROGRESS_ON_DETECTION"


@dataclass
class DoctorReport:
    """Everything the doctor found: the probe's data, the watched run's report (if a
    command was given), and the findings."""

    probe: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)
    command: list[str] | None = None
    returncode: int | None = None
    run: dict[str, Any] | None = None
    coding_agents: list[AgentStatus] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        if any(f.severity in (ERROR, WARNING) for f in self.findings):
            return EXIT_PROBLEMS
        return EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        probe = self.probe
        return {
            "python": probe.get("python"),
            "python_version": probe.get("python_version"),
            "opentelemetry_instrument": probe.get("opentelemetry_instrument"),
            "instrumentors": probe.get("instrumentors", []),
            "content": [
                {"instrumentation": s.instrumentation, "capture": s.capture.value, "detail": s.detail, "fix": s.fix}
                for s in (content_statuses(probe) if not probe.get("error") else [])
            ],
            "progress": probe.get("progress", {}),
            "export": probe.get("export"),
            "environment": probe.get("environment", {}),
            "command": self.command,
            "returncode": self.returncode,
            "run": self.run,
            "coding_agents": [a.to_dict() for a in self.coding_agents],
            "findings": [f.to_dict() for f in self.findings],
            "exit_status": self.exit_status,
        }


class DoctorError(Exception):
    """The doctor could not do its job (bad command, interpreter that cannot run)."""


def _is_python(word: str) -> bool:
    return os.path.basename(word).startswith("python")


def _split_command(command: Sequence[str]) -> tuple[list[str], list[str], str | None]:
    """``(launcher, program, python)``: a leading ``opentelemetry-instrument`` with its own
    options (kept as given), the program it runs, and that program's interpreter when it is
    a Python (else None)."""
    cmd = list(command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    launcher: list[str] = []
    if cmd and os.path.basename(cmd[0]) == "opentelemetry-instrument":
        launcher, cmd = cmd[:1], cmd[1:]
        while cmd and cmd[0].startswith("-"):  # its own --flags take a value each (or --flag=value)
            take = 1 if "=" in cmd[0] else 2
            launcher += cmd[:take]
            cmd = cmd[take:]
    python = None
    if cmd and _is_python(cmd[0]):
        python = shutil.which(cmd[0]) or cmd[0]
    return launcher, cmd, python


def run_probe(python: str, environ: Mapping[str, str], timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """Run the environment probe in ``python``; its data, or ``{"error": ...}``."""
    try:
        proc = subprocess.run([python, "-m", "otel_progress.doctor.probe"], env=dict(environ), capture_output=True,
                              text=True, errors="replace", timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    except FileNotFoundError:
        return {"error": f"{python}: no such interpreter", "python": python}
    except PermissionError:
        return {"error": f"{python}: cannot be run", "python": python}
    except subprocess.TimeoutExpired:
        return {"error": f"the probe did not finish within {timeout:.0f} s (an instrumentor hangs at start?)",
                "python": python}
    _, sep, tail = proc.stdout.rpartition(MARKER)
    if not sep:
        err = proc.stderr.strip().splitlines()
        reason = err[-1] if err else f"exit status {proc.returncode}"
        if "No module named" in reason and "otel_progress" in reason:
            reason = "otel-progress is not installed in this interpreter"
        return {"error": reason, "python": python}
    try:
        data = json.loads(tail.strip().splitlines()[0])
    except (ValueError, IndexError):
        return {"error": "the probe's output could not be read", "python": python}
    return data if isinstance(data, dict) else {"error": "the probe's output could not be read"}


def _instrument_command(probe: Mapping[str, Any], launcher: list[str], command: list[str]) -> list[str]:
    if launcher:
        return [*launcher, *command]
    found = probe.get("opentelemetry_instrument") or shutil.which("opentelemetry-instrument")
    if not found:
        raise DoctorError("opentelemetry-instrument was not found (pip install opentelemetry-instrumentation)")
    return [str(found), *command]


def _watched_env(environ: Mapping[str, str], report_path: str) -> dict[str, str]:
    env = dict(environ)
    user_hook = env.get(_ENV_HOOK, "").strip()
    if user_hook and user_hook != HOOK:
        env[ENV_CHAINED_HOOK] = user_hook
    env[_ENV_HOOK] = HOOK
    env[ENV_REPORT] = report_path
    return env


def run_watched(command: list[str], environ: Mapping[str, str], timeout: float | None,
                stdout_to_stderr: bool) -> tuple[int | None, dict[str, Any] | None, str]:
    """Run the (already instrumented) command; its exit status (None on timeout), the
    watcher's report (None when it wrote none) and a note."""
    folder = tempfile.mkdtemp(prefix="otel-progress-doctor-")
    path = os.path.join(folder, "run.json")
    note = ""
    try:
        try:
            proc = subprocess.Popen(command, env=_watched_env(environ, path), start_new_session=True,
                                    stdout=sys.stderr.fileno() if stdout_to_stderr else None)
        except FileNotFoundError as exc:
            raise DoctorError(f"cannot run {command[0]!r}: no such file") from exc
        except PermissionError as exc:
            raise DoctorError(f"cannot run {command[0]!r}: permission denied") from exc
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            note = f"the command did not finish within {timeout:.0f} s and was stopped"
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired, PermissionError):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            code = None
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            code = proc.wait()
            note = "interrupted"
        report = None
        if os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as f:
                    report = json.load(f)
            except (OSError, ValueError):
                note = note or "the run's report could not be read"
        return code, report, note
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def diagnose(command: Sequence[str] | None = None, environ: Mapping[str, str] | None = None,
             timeout: float | None = None, stdout_to_stderr: bool = False) -> DoctorReport:
    """Examine the environment and, given a ``command``, watch one run of it."""
    env = dict(os.environ if environ is None else environ)
    launcher, cmd, python = _split_command(command or ())
    if command and not cmd:
        raise DoctorError("no command after '--'")
    probe = run_probe(python or sys.executable, env)
    agents = agent_statuses(env)
    report = DoctorReport(probe=probe, findings=environment_findings(probe, cli_exporter_signals(agents)))
    report.coding_agents = agents
    report.findings += agent_findings(agents)
    if not cmd:
        return report
    report.command = cmd
    if probe.get("error") and python:
        raise DoctorError(f"cannot examine {python}: {probe['error']}")
    if shutil.which(cmd[0], path=env.get("PATH")) is None:
        raise DoctorError(f"cannot run {cmd[0]!r}: not found, or not executable")
    code, run, note = run_watched(_instrument_command(probe, launcher, cmd), env, timeout, stdout_to_stderr)
    report.returncode, report.run = code, run
    report.findings += run_findings(run, code, env) + grouping_findings(run)
    if note:
        report.findings.append(Finding(WARNING, "run", note))
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``doctor`` sub-command's options."""
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="text: readable (default); json: one JSON object on stdout")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="stop the command after this long (default: no limit)")
    parser.add_argument("run_command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                        help="run COMMAND (e.g. python agent.py) under opentelemetry-instrument and report its spans")


def run(args: argparse.Namespace) -> int:
    """Run ``otel-progress doctor`` with parsed ``args``; the exit status."""
    from .render import render_text

    command = list(args.run_command or ())
    if command and command[0] != "--" and command[0].startswith("-"):
        sys.stderr.write(f"otel-progress doctor: unknown option {command[0]!r} (put the command after '--')\n")
        return EXIT_USAGE
    if args.timeout is not None and args.timeout <= 0:
        sys.stderr.write("otel-progress doctor: --timeout must be positive\n")
        return EXIT_USAGE
    try:
        report = diagnose(command or None, timeout=args.timeout, stdout_to_stderr=args.format == "json")
    except DoctorError as exc:
        sys.stderr.write(f"otel-progress doctor: {exc}\n")
        return EXIT_USAGE
    if args.format == "json":
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render_text(report))
    sys.stdout.flush()
    return report.exit_status
