"""The rows of the JavaScript matrix: the ``setups.toml`` files under ``setups/``, read and
checked into :class:`Setup` values, and the README's JavaScript "Works with" table made
from them and from each framework's ``package.json`` pins."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.frameworks.rows import SCENARIOS

ROOT = Path(__file__).resolve().parents[2]
SETUPS_DIR = Path(__file__).resolve().parent / "setups"
RUN_TIMEOUT_S = 180
PACKAGE = "package.json"
LOCKFILE = "package-lock.json"


@dataclass(frozen=True)
class Setup:
    """One row of the JavaScript matrix: a framework with one instrumentation and its settings."""

    framework: str
    name: str
    instrumentation: str
    title: str = ""
    env: dict[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    works: bool = True
    reason: str = ""
    xfail: dict[str, str] = field(default_factory=dict)
    min_tool_spans: int = 3
    timeout: float = RUN_TIMEOUT_S
    notes: str = ""
    settings: str = ""  # what the user writes to get these spans, for the README table
    root: Path = SETUPS_DIR

    @property
    def id(self) -> str:
        return f"{self.framework}/{self.name}"

    @property
    def directory(self) -> Path:
        return self.root / self.framework


class SetupError(ValueError):
    """A setups.toml or package.json that does not follow the format."""


_KEYS = {"name", "instrumentation", "env", "args", "status", "reason", "xfail", "min_tool_spans", "timeout",
         "notes", "settings"}


def _setup_from(framework: str, raw: dict[str, Any], where: Path, title: str) -> Setup:
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
    return Setup(
        framework=framework, name=raw["name"], instrumentation=raw["instrumentation"], title=title or framework,
        env={str(k): str(v) for k, v in dict(raw.get("env", {})).items()},
        args=tuple(str(a) for a in raw.get("args", ())), works=status == "works", reason=reason,
        xfail={str(k): str(v) for k, v in xfail.items()}, min_tool_spans=int(raw.get("min_tool_spans", 3)),
        timeout=float(raw.get("timeout", RUN_TIMEOUT_S)), notes=str(raw.get("notes", "")),
        settings=str(raw.get("settings", "")), root=where.parent.parent,
    )


def check_package(directory: Path) -> dict[str, str]:
    """The framework's ``package.json`` dependencies, checked: every one an exact version
    (no range, tag or URL) and a ``package-lock.json`` beside it."""
    path = directory / PACKAGE
    if not path.is_file():
        raise SetupError(f"{directory}: no {PACKAGE}")
    if not (directory / LOCKFILE).is_file():
        raise SetupError(f"{directory}: no {LOCKFILE} (npm install --package-lock-only in that directory)")
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise SetupError(f"{path}: not JSON: {exc}") from None
    deps = data.get("dependencies") or {}
    if not isinstance(deps, dict) or not deps:
        raise SetupError(f"{path}: no dependencies")
    loose = [f"{k}@{v}" for k, v in deps.items() if not isinstance(v, str) or not _exact(v)]
    if loose:
        raise SetupError(f"{path}: not pinned to an exact version: {loose}")
    return {str(k): str(v) for k, v in deps.items()}


def _exact(version: str) -> bool:
    core = version.split("-", 1)[0]
    parts = core.split(".")
    return len(parts) == 3 and all(p.isdigit() for p in parts)


def discover(root: Path = SETUPS_DIR) -> list[Setup]:
    """Every set-up of every framework directory under ``root``, in name order."""
    out: list[Setup] = []
    for path in sorted(root.glob("*/setups.toml")):
        with path.open("rb") as f:
            data = tomllib.load(f)
        rows = data.get("setup", [])
        if not rows:
            raise SetupError(f"{path}: no [[setup]] tables")
        if not (path.parent / "agent.mjs").is_file():
            raise SetupError(f"{path.parent}: no agent.mjs")
        unknown = set(data) - {"setup", "title", "pins"}
        if unknown:
            raise SetupError(f"{path}: unknown top-level keys {sorted(unknown)}")
        check_package(path.parent)
        out += [_setup_from(path.parent.name, row, path, str(data.get("title", ""))) for row in rows]
    names = [s.id for s in out]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise SetupError(f"duplicate set-up names: {sorted(dupes)}")
    return out


def table_pins(setup: Setup) -> list[str]:
    """The packages the README row names (``pins`` in setups.toml, default: all but the
    OpenTelemetry SDK's and zod)."""
    with (setup.directory / "setups.toml").open("rb") as f:
        named = tomllib.load(f).get("pins")
    deps = check_package(setup.directory)
    if named is None:
        named = [k for k in deps if not k.startswith("@opentelemetry/") and k != "zod"]
    missing = [n for n in named if n not in deps]
    if missing:
        raise SetupError(f"{setup.directory}/setups.toml: pins not in package.json: {missing}")
    return [f"{n} {deps[n]}" for n in named]


WORKS_WITH_HEADER = ("| Framework | Instrumentation | Versions tested | OTel JS SDK (sdk-trace-base) | Settings "
                     "| Result |\n| --- | --- | --- | --- | --- | --- |")


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def locked_version(directory: Path, package: str) -> str | None:
    """The version of ``package`` that the framework's lockfile installs at the top level."""
    try:
        packages = json.loads((directory / LOCKFILE).read_text()).get("packages") or {}
    except ValueError:
        return None
    entry = packages.get(f"node_modules/{package}")
    return entry.get("version") if isinstance(entry, dict) else None


def works_with_row(setup: Setup) -> str:
    """The set-up's row of the README's JavaScript "Works with" table."""
    sdk = locked_version(setup.directory, "@opentelemetry/sdk-trace-base") or "?"
    settings = _one_line(setup.settings) if setup.settings else "—"
    if not setup.works:
        result = f"cannot work: {_one_line(setup.reason)}"
    elif setup.xfail:
        result = "known defect, fix pending: " + _one_line("; ".join(sorted(set(setup.xfail.values()))))
    else:
        result = "loop and empty search caught, healthy run left alone"
    return (f"| {setup.title} | {_one_line(setup.instrumentation)} | {', '.join(table_pins(setup))} | {sdk} | "
            f"{settings} | {result} |")


def works_with_table(setups: Iterable[Setup]) -> str:
    return "\n".join([WORKS_WITH_HEADER, *(works_with_row(s) for s in setups)])
