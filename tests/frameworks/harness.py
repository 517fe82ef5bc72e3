"""The framework × instrumentation matrix harness (issue 9).

Each directory ``setups/<framework>/`` holds ``agent.py`` (a real agent on a scripted
model), one or more pip requirements files with exact pins, and ``setups.toml``, the list
of set-ups for that framework (see ``tests/frameworks/README.md``). For each set-up the
harness builds, once, a virtualenv with those requirements and otel-progress itself, then
runs ``opentelemetry-instrument python agent.py <scenario>`` in it with the console span
exporter and returns the spans it printed.

Run one set-up by hand (builds its virtualenv if needed, prints a summary of the spans)::

    python -m tests.frameworks.harness <framework> <setup> <scenario> [--dump DIR]
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.otel_console import console_spans

ROOT = Path(__file__).resolve().parents[2]
SETUPS_DIR = Path(__file__).resolve().parent / "setups"
SCENARIOS = ("loop", "empty_search", "healthy")
DETECTION_EVENTS = ("no_progress", "livelock")
CACHE_DIR = Path(os.environ.get("OTEL_PROGRESS_MATRIX_CACHE", "~/.cache/otel-progress/frameworks")).expanduser()
BUILD_TIMEOUT_S = 20 * 60
RUN_TIMEOUT_S = 240

#: Environment of every agent run (a set-up's ``env`` is applied on top). The proxy
#: variables point every HTTP client that honours them at a closed local port, so an agent
#: that tried to reach a real model service would fail at once instead of leaving the machine.
BASE_ENV = {
    "OTEL_TRACES_EXPORTER": "console",
    "OTEL_METRICS_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
    "OTEL_BSP_SCHEDULE_DELAY": "200",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
    "DO_NOT_TRACK": "1",
    "ANONYMIZED_TELEMETRY": "false",
    "TRACELOOP_TELEMETRY": "false",
    "CREWAI_DISABLE_TELEMETRY": "true",
    "HF_HUB_OFFLINE": "1",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
#: Variables of the test process that never reach an agent run.
_DROPPED_ENV_PREFIXES = ("OTEL_", "PYTEST_", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "OPENAI_", "ANTHROPIC_",
                         "GOOGLE_", "GEMINI_", "AWS_", "TRACELOOP_", "PHOENIX_", "LOGFIRE_")
#: pip output that means the package index could not be reached (not a bad pin).
_NETWORK_ERRORS = re.compile(r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|"
                             r"Network is unreachable|Connection refused|ConnectTimeout|ReadTimeout")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


@dataclass(frozen=True)
class Setup:
    """One row of the matrix: a framework with one instrumentation and its settings."""

    framework: str
    name: str
    instrumentation: str
    title: str = ""  # the framework's display name (setups.toml's top-level `title`)
    requirements: str = "requirements.txt"
    env: dict[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    works: bool = True
    reason: str = ""
    xfail: dict[str, str] = field(default_factory=dict)  # scenario -> defect
    tool_span_names: str = ""  # regex: more span names that are tool calls in this set-up
    min_tool_spans: int = 3
    timeout: float = RUN_TIMEOUT_S
    notes: str = ""
    root: Path = SETUPS_DIR  # the directory holding the framework directories

    @property
    def id(self) -> str:
        return f"{self.framework}/{self.name}"

    @property
    def directory(self) -> Path:
        return self.root / self.framework

    @property
    def requirements_path(self) -> Path:
        return self.directory / self.requirements


class SetupError(ValueError):
    """A setups.toml that does not follow the format."""


_KEYS = {"name", "instrumentation", "requirements", "env", "args", "status", "reason", "xfail",
         "tool_span_names", "min_tool_spans", "timeout", "notes"}


def _setup_from(framework: str, raw: dict[str, Any], where: Path, title: str = "") -> Setup:
    """One ``[[setup]]`` table of ``where`` (a ``setups.toml``), checked."""
    unknown = set(raw) - _KEYS
    if unknown:
        raise SetupError(f"{where}: unknown keys {sorted(unknown)} in set-up {raw.get('name')!r}")
    for key in ("name", "instrumentation"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise SetupError(f"{where}: every set-up needs a {key!r} string")
    status = raw.get("status", "works")
    if status not in ("works", "cannot"):
        raise SetupError(f"{where}: {raw['name']}: status must be 'works' or 'cannot', not {status!r}")
    reason = str(raw.get("reason", ""))
    if status == "cannot" and not reason:
        raise SetupError(f"{where}: {raw['name']}: status 'cannot' needs a reason")
    xfail = raw.get("xfail", {})
    if isinstance(xfail, str):
        xfail = dict.fromkeys(SCENARIOS, xfail)
    if not isinstance(xfail, dict) or not set(xfail) <= set(SCENARIOS):
        raise SetupError(f"{where}: {raw['name']}: xfail is a string or a table keyed by {SCENARIOS}")
    setup = Setup(
        framework=framework,
        title=title or framework,
        name=raw["name"],
        instrumentation=raw["instrumentation"],
        requirements=str(raw.get("requirements", "requirements.txt")),
        env={str(k): str(v) for k, v in dict(raw.get("env", {})).items()},
        args=tuple(str(a) for a in raw.get("args", ())),
        works=status == "works",
        reason=reason,
        xfail={str(k): str(v) for k, v in xfail.items()},
        tool_span_names=str(raw.get("tool_span_names", "")),
        min_tool_spans=int(raw.get("min_tool_spans", 3)),
        timeout=float(raw.get("timeout", RUN_TIMEOUT_S)),
        notes=str(raw.get("notes", "")),
        root=where.parent.parent,
    )
    if not setup.requirements_path.is_file():
        raise SetupError(f"{where}: {setup.name}: no requirements file {setup.requirements}")
    return setup


def discover(root: Path = SETUPS_DIR) -> list[Setup]:
    """Every set-up of every framework directory under ``root``, in name order."""
    out: list[Setup] = []
    for path in sorted(root.glob("*/setups.toml")):
        with path.open("rb") as f:
            data = tomllib.load(f)
        rows = data.get("setup", [])
        if not rows:
            raise SetupError(f"{path}: no [[setup]] tables")
        if not (path.parent / "agent.py").is_file():
            raise SetupError(f"{path.parent}: no agent.py")
        unknown = set(data) - {"setup", "title"}
        if unknown:
            raise SetupError(f"{path}: unknown top-level keys {sorted(unknown)}")
        title = str(data.get("title", ""))
        out += [_setup_from(path.parent.name, row, path, title) for row in rows]
    names = [s.id for s in out]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise SetupError(f"duplicate set-up names: {sorted(dupes)}")
    return out


# --- virtualenvs ---------------------------------------------------------------------------


def _project_metadata() -> str:
    """What of the repo's ``pyproject.toml`` goes into a virtualenv: the ``[project]`` table
    (dependencies, entry points) without the optional extras, and the build system. A change
    there must rebuild the virtualenvs; one to the test extra must not."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        data = tomllib.load(f)
    project = {k: v for k, v in data.get("project", {}).items() if k != "optional-dependencies"}
    return json.dumps([project, data.get("build-system")], sort_keys=True)


def venv_path(requirements: Path) -> Path:
    """Where the virtualenv for one requirements file lives: named after the framework and
    the file, keyed by the file's text, the Python version and the repo's packaging
    metadata (:func:`_project_metadata`). Not by the checkout: the code that runs is the checkout's
    (:func:`source_path`), so a fresh clone elsewhere reuses the same virtualenvs."""
    key = hashlib.sha256()
    for part in (requirements.read_text(), sys.version, _project_metadata()):
        key.update(part.encode())
        key.update(b"\0")
    stem = requirements.stem.removeprefix("requirements").strip("-_") or "default"
    return CACHE_DIR / f"{requirements.parent.name}-{stem}-{key.hexdigest()[:12]}"


def source_path() -> Path:
    """A directory holding only a link to this checkout's ``otel_progress`` package, put
    first on the agents' ``PYTHONPATH``: the virtualenvs carry an installed copy of
    otel-progress (its dependencies and its ``opentelemetry_instrumentor`` entry point),
    and the checkout's code is what is imported."""
    digest = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    src = CACHE_DIR / "src" / digest
    link = src / "otel_progress"
    if not link.is_symlink() or link.resolve() != (ROOT / "otel_progress").resolve():
        src.mkdir(parents=True, exist_ok=True)
        tmp = src / f".otel_progress.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(ROOT / "otel_progress", target_is_directory=True)
        tmp.replace(link)
    return src


def _snapshot_project(into: Path) -> Path:
    """A copy of the project's packaging files and package, so pip builds it outside the
    shared working tree (no ``build/`` there, no two builds in one directory)."""
    dest = into / "otel-progress"
    shutil.copytree(ROOT / "otel_progress", dest / "otel_progress",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    return dest


class BuildError(RuntimeError):
    """pip could not build a virtualenv; ``network`` when the index was unreachable."""

    def __init__(self, message: str, network: bool) -> None:
        super().__init__(message)
        self.network = network


#: Progress lines of the builds; under pytest the fixture drains them to the terminal (a
#: background thread cannot write past pytest's capture), elsewhere they go to stderr.
PROGRESS: queue.SimpleQueue[str] | None = None


def _say(message: str) -> None:
    line = f"[frameworks] {message}"
    if PROGRESS is not None:
        PROGRESS.put(line)
    else:
        print(line, file=sys.stderr, flush=True)


def _run_build(venv: Path, requirements: Path, project: Path, log: Path, label: str, start: float) -> None:
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q",
         "-r", str(requirements), str(project)],
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH", "PIP_REQUIRE"))}
    with log.open("w") as out:
        for cmd in steps:
            out.write(f"$ {' '.join(cmd)}\n")
            out.flush()
            remaining = BUILD_TIMEOUT_S - (time.monotonic() - start)
            try:
                proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                      timeout=max(remaining, 1), check=False, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                shutil.rmtree(venv, ignore_errors=True)
                raise BuildError(f"building {venv.name} timed out after {BUILD_TIMEOUT_S} s; see {log}",
                                 network=False) from None
            if proc.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                text = log.read_text()
                raise BuildError(f"building {venv.name} for {label} failed:\n{text[-3000:]}",
                                 network=bool(_NETWORK_ERRORS.search(text)))


def build_venv(requirements: Path) -> Path:
    """The virtualenv for ``requirements``: reused when complete, else built (one builder at
    a time per venv, across processes). Raises :class:`BuildError`."""
    venv = venv_path(requirements)
    done = venv / ".complete"
    if done.exists():
        return venv
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    log = venv.with_suffix(".log")
    with open(venv.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        label = f"{requirements.parent.name}/{requirements.name}"
        _say(f"building {venv.name} for {label} (log: {log})")
        start = time.monotonic()
        workdir = Path(tempfile.mkdtemp(prefix="otel-progress-build-"))
        try:
            _run_build(venv, requirements, _snapshot_project(workdir), log, label, start)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        done.write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))
        _say(f"built {venv.name} in {time.monotonic() - start:.0f} s")
    return venv


class Builder:
    """Builds the virtualenvs of many set-ups in a few parallel processes, in the order
    they were asked for; :meth:`get` waits for one."""

    def __init__(self, jobs: int | None = None) -> None:
        jobs = jobs or int(os.environ.get("OTEL_PROGRESS_MATRIX_BUILD_JOBS", "2"))
        self._pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="venv-build")
        self._futures: dict[Path, Future[Path]] = {}

    def submit(self, requirements: Iterable[Path]) -> None:
        for req in requirements:
            if req not in self._futures:
                self._futures[req] = self._pool.submit(build_venv, req)

    def get(self, requirements: Path, waiting: Callable[[], None] | None = None) -> Path:
        """The virtualenv of ``requirements``; ``waiting`` is called every few seconds
        while its build goes on."""
        self.submit([requirements])
        future = self._futures[requirements]
        deadline = time.monotonic() + BUILD_TIMEOUT_S * 2
        while True:
            try:
                return future.result(timeout=5)
            except FutureTimeout:
                if time.monotonic() > deadline:
                    raise BuildError(f"no virtualenv for {requirements} after {BUILD_TIMEOUT_S * 2} s",
                                     network=False) from None
                if waiting is not None:
                    waiting()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


# --- runs ----------------------------------------------------------------------------------


@dataclass
class Run:
    """One agent run: its exit status, output and the spans it exported."""

    setup: Setup
    scenario: str
    returncode: int
    stdout: str
    stderr: str
    spans: list[dict[str, Any]]
    seconds: float

    def tool_spans(self) -> list[dict[str, Any]]:
        extra = re.compile(self.setup.tool_span_names) if self.setup.tool_span_names else None
        return [s for s in self.spans if is_tool_span(s) or (extra is not None and extra.search(s["name"]))]

    def flagged(self) -> list[dict[str, Any]]:
        """Spans that carry a ``no_progress``/``livelock`` event or ``progress.detected``."""
        return [s for s in self.spans if detection_events(s) or (s.get("attributes") or {}).get("progress.detected")]

    def crashes(self) -> list[str]:
        """Tracebacks in stderr that pass through otel-progress's code."""
        blocks = re.split(r"(?=^Traceback \(most recent call last\):)", self.stderr, flags=re.M)
        return [b[:4000] for b in blocks if b.startswith("Traceback") and "otel_progress" in b]

    def summary(self, width: int = 160) -> str:
        """One line per span: name, kind markers, progress events, a few content keys."""
        lines = [f"{self.setup.id} {self.scenario}: exit {self.returncode}, {len(self.spans)} spans, "
                 f"{len(self.tool_spans())} tool spans, {self.seconds:.1f} s"]
        for s in sorted(self.spans, key=lambda s: s.get("start_time") or ""):
            attrs = s.get("attributes") or {}
            marks = [f"{k}={attrs[k]}" for k in ("gen_ai.operation.name", "openinference.span.kind",
                                                   "traceloop.span.kind", "mcp.method.name") if k in attrs]
            events = [f"{e['name']}({(e.get('attributes') or {}).get('progress.reason')})" for e in detection_events(s)]
            trace = (s.get("context") or {}).get("trace_id", "")[-6:]
            line = f"  [{trace}] {s['name']!r} {' '.join(marks)} {' '.join(events)}"
            lines.append(line[:width])
        return "\n".join(lines)


_TOOL_MARKERS = (("gen_ai.operation.name", "execute_tool"), ("openinference.span.kind", "TOOL"),
                 ("traceloop.span.kind", "tool"), ("mcp.method.name", "tools/call"))


def is_tool_span(span: dict[str, Any]) -> bool:
    """Whether a span is a tool call by any of the conventions' markers (the harness's own
    test, independent of otel-progress's readers). LlamaIndex under OpenLLMetry marks every
    step ``task``; its agents' ``call_tool`` step is the one that names the tool."""
    attrs = span.get("attributes") or {}
    return any(attrs.get(k) == v for k, v in _TOOL_MARKERS) or (
        "tool.name" in attrs and attrs.get("traceloop.span.kind") == "task")


def detection_events(span: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in span.get("events") or () if e.get("name") in DETECTION_EVENTS]


def agent_env(setup: Setup, environ: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in (os.environ if environ is None else environ).items()
           if not k.startswith(_DROPPED_ENV_PREFIXES)}
    env.update(BASE_ENV)
    env["OTEL_SERVICE_NAME"] = f"matrix-{setup.framework}-{setup.name}"
    env.update(setup.env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(source_path()), setup.env.get("PYTHONPATH", "")) if p)
    return env


def run_agent(setup: Setup, scenario: str, venv: Path, dump: Path | None = None) -> Run:
    """Run ``agent.py <scenario>`` of ``setup`` under ``opentelemetry-instrument`` in ``venv``."""
    cmd = [str(venv / "bin" / "opentelemetry-instrument"), str(venv / "bin" / "python"), "agent.py", scenario,
           *setup.args]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=setup.directory, env=agent_env(setup), capture_output=True, text=True,
                              timeout=setup.timeout, check=False, stdin=subprocess.DEVNULL)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code = -1
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = (exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or ""))
        err += f"\n[harness] timed out after {setup.timeout} s"
    run = Run(setup, scenario, code, out, err, console_spans(out), time.monotonic() - start)
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        base = dump / f"{setup.framework}-{setup.name}-{scenario}"
        base.with_suffix(".out").write_text(out)
        base.with_suffix(".err").write_text(err)
    return run


# --- the README's "Works with" table ------------------------------------------------------

_SDK_PINS = ("opentelemetry-sdk", "opentelemetry-distro")
WORKS_WITH_HEADER = ("| Framework | Instrumentation | Versions tested | OTel SDK / distro | Settings | Result |\n"
                     "| --- | --- | --- | --- | --- | --- |")


def pins(setup: Setup) -> dict[str, str]:
    """``name -> version`` of the ``==`` pins in the set-up's requirements file."""
    out: dict[str, str] = {}
    for line in setup.requirements_path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line and not line.startswith("-"):
            name, _, version = line.partition("==")
            out[name.strip()] = version.strip()
    return out


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def works_with_row(setup: Setup) -> str:
    """The set-up's row of the README's "Works with" table."""
    pinned = pins(setup)
    versions = ", ".join(f"{k} {v}" for k, v in pinned.items() if k not in _SDK_PINS)
    sdk = " / ".join(pinned.get(k, "?") for k in _SDK_PINS)
    settings = ", ".join(f"`{k}={v}`" for k, v in setup.env.items()) or "—"
    if not setup.works:
        result = f"cannot work: {_one_line(setup.reason)}"
    elif setup.xfail:
        result = "known defect, fix pending: " + _one_line("; ".join(sorted(set(setup.xfail.values()))))
    else:
        result = "loop and empty search caught, healthy run left alone"
    return f"| {setup.title} | {_one_line(setup.instrumentation)} | {versions} | {sdk} | {settings} | {result} |"


def works_with_table(setups: Iterable[Setup]) -> str:
    return "\n".join([WORKS_WITH_HEADER, *(works_with_row(s) for s in setups)])


def prebuild(jobs: int = 2) -> int:
    """Build every set-up's virtualenv, ``jobs`` at a time (CI starts this in the background
    before the tests, at low priority; the tests then find them built or wait on their lock).
    Returns 1 if any build failed (the tests that need it will fail and say why)."""
    requirements = list(dict.fromkeys(s.requirements_path for s in discover()))
    builder = Builder(jobs)
    builder.submit(requirements)
    start = time.monotonic()
    failed = 0
    for req in requirements:
        try:
            builder.get(req)
        except BuildError as exc:
            failed += 1
            _say(str(exc).splitlines()[0])
    builder.shutdown()
    _say(f"prebuild: {len(requirements)} virtualenvs, {failed} failed, {time.monotonic() - start:.0f} s")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.frameworks.harness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("framework", help="a directory under setups/; 'works-with' prints the README table; "
                                          "'prebuild [JOBS]' builds every set-up's virtualenv")
    parser.add_argument("setup", nargs="?", help="set-up name (default: list them)")
    parser.add_argument("scenario", nargs="*", help=f"any of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--dump", type=Path, help="write each run's stdout/stderr into this directory")
    parser.add_argument("--attrs", action="store_true", help="also print every attribute of the tool spans")
    args = parser.parse_args(argv)
    if args.framework == "works-with":
        print(works_with_table(discover()))
        return 0
    if args.framework == "prebuild":
        return prebuild(int(args.setup or os.environ.get("OTEL_PROGRESS_MATRIX_BUILD_JOBS", "2")))
    setups = [s for s in discover() if s.framework == args.framework]
    if not args.setup:
        for s in setups:
            print(s.name, "-", s.instrumentation, "" if s.works else f"(cannot: {s.reason})")
        return 0
    (setup,) = [s for s in setups if s.name == args.setup] or [None]
    if setup is None:
        parser.error(f"no set-up {args.setup!r} in {args.framework}")
    bad = [s for s in args.scenario if s not in SCENARIOS]
    if bad:
        parser.error(f"unknown scenario {bad[0]!r}; choose from {', '.join(SCENARIOS)}")
    venv = build_venv(setup.requirements_path)
    for scenario in args.scenario or SCENARIOS:
        run = run_agent(setup, scenario, venv, args.dump)
        print(run.summary())
        if args.attrs:
            for s in run.tool_spans():
                print(json.dumps({"name": s["name"], "attributes": s.get("attributes"),
                                  "events": s.get("events")}, indent=1)[:6000])
        if run.returncode != 0:
            print(run.stderr[-3000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
