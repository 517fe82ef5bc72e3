"""The rows of the JavaScript matrix: the ``setups.toml`` files under ``setups/``, read and
checked into :class:`Setup` values, and the README's JavaScript "Works with" table made
from them and from each framework's ``package.json`` pins."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests._matrix.rows import (
    SCENARIOS,
    MatrixSetup,
    SetupError,
    discover_setups,
    one_line,
    read_setup,
    works_with_header,
)
from tests._matrix.rows import works_with_row as _row

__all__ = ["LOCKFILE", "PACKAGE", "ROOT", "RUN_TIMEOUT_S", "SCENARIOS", "SETUPS_DIR", "WORKS_WITH_HEADER", "Setup",
           "SetupError", "check_package", "discover", "locked_version", "table_pins", "works_with_row",
           "works_with_table"]

ROOT = Path(__file__).resolve().parents[2]
SETUPS_DIR = Path(__file__).resolve().parent / "setups"
RUN_TIMEOUT_S = 180
PACKAGE = "package.json"
LOCKFILE = "package-lock.json"


@dataclass(frozen=True)
class Setup(MatrixSetup):
    """One row of the JavaScript matrix: a framework with one instrumentation and its settings."""

    timeout: float = RUN_TIMEOUT_S
    root: Path = SETUPS_DIR
    settings: str = ""  # what the user writes to get these spans, for the README table


def _setup_from(raw: dict[str, Any], where: Path, title: str) -> Setup:
    return read_setup(Setup, raw, where, title, timeout=RUN_TIMEOUT_S, extras={"settings": ""})


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
    return discover_setups(root, "agent.mjs", _setup_from, top_level=("setup", "title", "pins"), check=check_package)


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


WORKS_WITH_HEADER = works_with_header("OTel JS SDK (sdk-trace-base)")


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
    settings = one_line(setup.settings) if setup.settings else "—"
    return _row(setup, ", ".join(table_pins(setup)), sdk, settings)


def works_with_table(setups: Iterable[Setup]) -> str:
    return "\n".join([WORKS_WITH_HEADER, *(works_with_row(s) for s in setups)])
