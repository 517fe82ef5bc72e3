"""The rows of the framework matrix: the ``setups.toml`` files under ``setups/``, read
and checked into :class:`Setup` values, and the README's "Works with" table made from them
(the format and the rows' shape are both matrices': :mod:`tests._matrix.rows`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests._matrix.rows import SCENARIOS, MatrixSetup, SetupError, discover_setups, read_setup, works_with_header
from tests._matrix.rows import works_with_row as _row

__all__ = ["ROOT", "RUN_TIMEOUT_S", "SCENARIOS", "SETUPS_DIR", "WORKS_WITH_HEADER", "Setup", "SetupError",
           "discover", "pins", "works_with_row", "works_with_table"]

ROOT = Path(__file__).resolve().parents[2]
SETUPS_DIR = Path(__file__).resolve().parent / "setups"
RUN_TIMEOUT_S = 240


@dataclass(frozen=True)
class Setup(MatrixSetup):
    """One row of the matrix: a framework with one instrumentation and its settings."""

    timeout: float = RUN_TIMEOUT_S
    root: Path = SETUPS_DIR
    requirements: str = "requirements.txt"
    tool_span_names: str = ""  # regex: more span names that are tool calls in this set-up
    warning: str = ""  # text the loop and empty_search runs must print on stderr

    @property
    def requirements_path(self) -> Path:
        return self.directory / self.requirements


#: The Python matrix's own keys of a ``[[setup]]`` table, with their defaults.
_EXTRAS = {"requirements": "requirements.txt", "tool_span_names": "", "warning": ""}


def _setup_from(raw: dict[str, Any], where: Path, title: str) -> Setup:
    """One ``[[setup]]`` table of ``where`` (a ``setups.toml``), checked."""
    setup = read_setup(Setup, raw, where, title, timeout=RUN_TIMEOUT_S, extras=_EXTRAS)
    if not setup.requirements_path.is_file():
        raise SetupError(f"{where}: {setup.name}: no requirements file {setup.requirements}")
    return setup


def discover(root: Path = SETUPS_DIR) -> list[Setup]:
    """Every set-up of every framework directory under ``root``, in name order."""
    return discover_setups(root, "agent.py", _setup_from)


_SDK_PINS = ("opentelemetry-sdk", "opentelemetry-distro")
WORKS_WITH_HEADER = works_with_header("OTel SDK / distro")


def pins(setup: Setup) -> dict[str, str]:
    """``name -> version`` of the ``==`` pins in the set-up's requirements file."""
    out: dict[str, str] = {}
    for line in setup.requirements_path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line and not line.startswith("-"):
            name, _, version = line.partition("==")
            out[name.strip()] = version.strip()
    return out


def works_with_row(setup: Setup) -> str:
    """The set-up's row of the README's "Works with" table."""
    pinned = pins(setup)
    versions = ", ".join(f"{k} {v}" for k, v in pinned.items() if k not in _SDK_PINS)
    sdk = " / ".join(pinned.get(k, "?") for k in _SDK_PINS)
    settings = ", ".join(f"`{k}={v}`" for k, v in setup.env.items()) or "—"
    return _row(setup, versions, sdk, settings)


def works_with_table(setups: Iterable[Setup]) -> str:
    return "\n".join([WORKS_WITH_HEADER, *(works_with_row(s) for s in setups)])
