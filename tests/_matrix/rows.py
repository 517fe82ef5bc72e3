"""The rows of a matrix: the scenarios every set-up runs, the ``setups.toml`` format both
matrices read (each adds a few keys of its own), and the shape of a README "Works with" row."""

from __future__ import annotations

import functools
import importlib.util
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

#: The Python matrix's scripted model and tools (standard library only), which define the
#: scenarios; the JavaScript matrix's ``_common/scripted.mjs`` is checked against it.
SCRIPT = Path(__file__).resolve().parents[1] / "frameworks" / "setups" / "_common" / "scripted.py"


@functools.cache
def load_script() -> ModuleType:
    """:data:`SCRIPT` loaded from its file (the agents import it from their own path)."""
    spec = importlib.util.spec_from_file_location("_matrix_scripted", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCENARIOS: tuple[str, ...] = tuple(load_script().SCENARIOS)
#: The model's side of the loop (issue 29): run only by the set-ups whose ``setups.toml``
#: lists them in ``model_scenarios``.
MODEL_SCENARIOS: tuple[str, ...] = tuple(load_script().MODEL_SCENARIOS)
#: What each model scenario must bring: the ``progress.reason`` of a detection, or None
#: (the healthy twins: no span annotated).
MODEL_EXPECTED: dict[str, str | None] = {
    "text_loop": "text_repeat",
    "text_healthy": None,
    "reasoning_loop": "text_repeat",
    "reasoning_healthy": None,
    "unknown_tool": "unexecuted_repeat",
    "unknown_tool_healthy": None,
    "refused_tool": "unexecuted_repeat",
    "refused_tool_healthy": None,
}
#: The model-scenario rows (``<framework>/<setup>/<scenario>``) whose expectation is not met
#: on main, each with what is missing (tests/frameworks*/FINDINGS.md, *The model's side of the
#: loop*). They are strict xfails with that reason: the day the gap is closed the row fails as
#: XPASS and its entry must go. Every other model-scenario row passes (the loops caught with
#: their reason, the healthy twins quiet).
AWAITING_ISSUE_29: dict[str, str] = {
    "openai_agents/openinference/refused_tool": (
        "the OpenAI Agents SDK under OpenInference writes a TOOL span for every refused call (its arguments, no "
        "output, no status or attribute that tells a refusal), so each refusal reads as a call that ran: "
        "unexecuted_repeat is not caught (signature_repeat, scope run, is, at the 3rd resumed run)"),
}
assert set(MODEL_EXPECTED) == set(MODEL_SCENARIOS)


@dataclass(frozen=True)
class MatrixSetup:
    """What a row of either matrix has: a framework with one instrumentation and its settings.
    Each matrix subclasses it with its own fields and defaults (``timeout``, ``root``)."""

    framework: str
    name: str
    instrumentation: str
    title: str = ""  # the framework's display name (setups.toml's top-level `title`)
    env: dict[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    works: bool = True
    reason: str = ""
    xfail: dict[str, str] = field(default_factory=dict)  # scenario -> defect
    model_scenarios: tuple[str, ...] = ()  # issue 29's scenarios this set-up runs too
    min_tool_spans: int = 3
    timeout: float = 0.0
    notes: str = ""
    root: Path = Path()  # the directory holding the framework directories

    @property
    def id(self) -> str:
        return f"{self.framework}/{self.name}"

    @property
    def directory(self) -> Path:
        return self.root / self.framework


class SetupError(ValueError):
    """A setups.toml (or a JavaScript framework's package.json) that does not follow the format."""


S = TypeVar("S", bound=MatrixSetup)

#: The keys of a ``[[setup]]`` table in both matrices.
KEYS = frozenset({"name", "instrumentation", "env", "args", "status", "reason", "xfail", "min_tool_spans",
                  "timeout", "notes", "model_scenarios"})


def read_setup(cls: type[S], raw: Mapping[str, Any], where: Path, title: str, *, timeout: float,
               extras: Mapping[str, str] | None = None) -> S:
    """One ``[[setup]]`` table of ``where`` (``<root>/<framework>/setups.toml``), checked,
    as a ``cls``; ``extras`` are the matrix's own string keys with their defaults, and
    ``timeout`` the default of ``timeout``."""
    extras = extras or {}
    unknown = set(raw) - KEYS - set(extras)
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
    model_scenarios = raw.get("model_scenarios", [])
    if not isinstance(model_scenarios, list) or not set(model_scenarios) <= set(MODEL_SCENARIOS):
        raise SetupError(f"{where}: {raw['name']}: model_scenarios is a list of {MODEL_SCENARIOS}")
    if not isinstance(xfail, dict) or not set(xfail) <= set(SCENARIOS) | set(model_scenarios):
        raise SetupError(f"{where}: {raw['name']}: xfail is a string or a table keyed by {SCENARIOS}")
    return cls(
        framework=where.parent.name,
        title=title or where.parent.name,
        name=raw["name"],
        instrumentation=raw["instrumentation"],
        env={str(k): str(v) for k, v in dict(raw.get("env", {})).items()},
        args=tuple(str(a) for a in raw.get("args", ())),
        works=status == "works",
        reason=reason,
        xfail={str(k): str(v) for k, v in xfail.items()},
        model_scenarios=tuple(str(m) for m in model_scenarios),
        min_tool_spans=int(raw.get("min_tool_spans", 3)),
        timeout=float(raw.get("timeout", timeout)),
        notes=str(raw.get("notes", "")),
        root=where.parent.parent,
        **{key: str(raw.get(key, default)) for key, default in extras.items()},
    )


def discover_setups(root: Path, agent: str, row: Callable[[dict[str, Any], Path, str], S], *,
                    top_level: Iterable[str] = ("setup", "title"),
                    check: Callable[[Path], object] | None = None) -> list[S]:
    """Every set-up of every framework directory under ``root`` (each with its ``agent``
    file and a ``setups.toml`` with these ``top_level`` keys; ``check`` checks the
    directory further), in name order; ``row(table, setups.toml, title)`` reads one."""
    out: list[S] = []
    for path in sorted(root.glob("*/setups.toml")):
        with path.open("rb") as f:
            data = tomllib.load(f)
        rows = data.get("setup", [])
        if not rows:
            raise SetupError(f"{path}: no [[setup]] tables")
        if not (path.parent / agent).is_file():
            raise SetupError(f"{path.parent}: no {agent}")
        unknown = set(data) - set(top_level)
        if unknown:
            raise SetupError(f"{path}: unknown top-level keys {sorted(unknown)}")
        if check is not None:
            check(path.parent)
        title = str(data.get("title", ""))
        out += [row(raw, path, title) for raw in rows]
    names = [s.id for s in out]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise SetupError(f"duplicate set-up names: {sorted(dupes)}")
    return out


# --- the README's "Works with" tables -----------------------------------------------------


def works_with_header(sdk_column: str) -> str:
    """The head of a "Works with" table; ``sdk_column`` names the SDK versions' column."""
    return (f"| Framework | Instrumentation | Versions tested | {sdk_column} | Settings | Result |\n"
            "| --- | --- | --- | --- | --- | --- |")


def one_line(text: str) -> str:
    """``text`` as one line of a Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def result(setup: MatrixSetup) -> str:
    """The Result cell of a set-up's row: what the matrix asserts of it."""
    if not setup.works:
        return f"cannot work: {one_line(setup.reason)}"
    if setup.xfail:
        return "known defect, fix pending: " + one_line("; ".join(sorted(set(setup.xfail.values()))))
    return "loop and empty search caught, healthy run left alone"


def works_with_row(setup: MatrixSetup, versions: str, sdk: str, settings: str) -> str:
    """A set-up's row of a "Works with" table, given the cells that each matrix reads its own way."""
    return (f"| {setup.title} | {one_line(setup.instrumentation)} | {versions} | {sdk} | {settings} | "
            f"{result(setup)} |")
