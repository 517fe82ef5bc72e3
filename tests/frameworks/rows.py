"""The rows of the framework matrix: the ``setups.toml`` files under ``setups/``, read
and checked into :class:`Setup` values, and the README's "Works with" table made from them."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SETUPS_DIR = Path(__file__).resolve().parent / "setups"
SCENARIOS = ("loop", "empty_search", "healthy")
RUN_TIMEOUT_S = 240


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
    warning: str = ""  # text the loop and empty_search runs must print on stderr
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
         "tool_span_names", "min_tool_spans", "timeout", "notes", "warning"}


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
        warning=str(raw.get("warning", "")),
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
