"""The package's layering: each module imports only its own layer or lower ones.

The layers, lowest first (issue 24): the shared vocabulary (``model``); what a request or
result says (``evidence``) and how spans and records are read (``conventions``); OTLP files
(``otlp``) and the engine (``engine``); what a run is (``runs``); the adapters
(``processor``, ``service``, ``scan``, ``doctor``); and the top (``cli``, ``demo``,
``instrument`` and the package's ``__init__``, the public API). Inside the engine, a
signal depends on the step and the run state, never on the pipeline that runs it or on
the engine; the run state depends on neither the pipeline nor the signals.

Two checks: a static one (every import statement of every module, including imports
inside functions and under ``TYPE_CHECKING``, and ``import_module`` calls with a literal
name) and a dynamic one (importing each lower layer in a fresh interpreter loads no
OpenTelemetry SDK, no gRPC and no module of a higher layer).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = "otel_progress"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

#: The layer of each top-level part of the package (a subpackage or a module).
LAYERS: dict[str, int] = {
    "model": 0,
    "evidence": 1,
    "conventions": 1,
    "otlp": 2,
    "engine": 2,
    "runs": 3,
    "processor": 4,
    "service": 4,
    "scan": 4,
    "doctor": 4,
    "cli": 5,
    "demo": 5,
    "instrument": 5,
    "__init__": 5,  # the package itself: the public API
}

#: Inside a layer: (importing module or package prefix, module or package it must not
#: import). A prefix covers the package and its submodules; ``engine`` alone is the
#: engine's ``__init__`` (its submodules are named in full).
FORBIDDEN: tuple[tuple[str, str], ...] = (
    ("engine.signals", "engine.pipeline"),
    ("engine.signals", "engine"),
    ("engine.runstate", "engine.pipeline"),
    ("engine.runstate", "engine.signals"),
)

#: Modules no lower layer may load, by name prefix (the adapters' dependencies).
HEAVY = ("opentelemetry.sdk", "grpc")

#: The packages of the lower layers imported on their own in a fresh interpreter.
LOWER_PACKAGES = ("model", "evidence", "conventions", "engine", "runs", "scan")


def _module_name(path: Path) -> str:
    """``engine.signals.base`` for otel_progress/engine/signals/base.py (``engine`` for
    its ``__init__.py``; ``__init__`` for the package's own)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _exists(name: str) -> bool:
    """Whether ``name`` (relative to the package) is a module or subpackage of it."""
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _resolve(path: Path, level: int, module: str | None) -> str | None:
    """The absolute dotted name a (relative) import in ``path`` names, or None when it is
    outside the package."""
    if level == 0:
        return module if module and (module == PACKAGE or module.startswith(PACKAGE + ".")) else None
    # The package the module is in (for an __init__.py, the package it is), then up.
    here = [PACKAGE, *path.relative_to(ROOT).parent.parts]
    base = ".".join(here[: len(here) - (level - 1)])
    return f"{base}.{module}" if module else base


def _targets(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module relative to the package: ``engine.pipeline``; ``__init__`` for the
    package itself) for every import in the module at ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name == PACKAGE or a.name.startswith(PACKAGE + ".")]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(path, node.level, node.module)
            if target is None:
                continue
            # ``from . import name``: name may be a submodule (then that is what is imported).
            for alias in node.names:
                sub = f"{target}.{alias.name}"[len(PACKAGE) + 1:]
                names.append(f"{PACKAGE}.{sub}" if alias.name != "*" and _exists(sub) else target)
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None))
              == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            name = node.args[0].value
            if name.startswith("."):
                dots = len(name) - len(name.lstrip("."))
                resolved = _resolve(path, dots, name[dots:] or None)
                if resolved:
                    names = [resolved]
            elif name == PACKAGE or name.startswith(PACKAGE + "."):
                names = [name]
        for name in names:
            rel = name[len(PACKAGE) + 1:] if name != PACKAGE else "__init__"
            yield node.lineno, rel


def _layer(rel: str) -> int:
    return LAYERS[rel.split(".")[0]]


def _covers(prefix: str, name: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _forbidden(importer: str, imported: str) -> str | None:
    for who, what in FORBIDDEN:
        if not _covers(who, importer):
            continue
        if what == "engine" and imported == "engine":
            return f"{who} must not import the engine package's __init__"
        if what != "engine" and _covers(what, imported):
            return f"{who} must not import {what}"
    return None


def layer_violations() -> list[str]:
    """Every import that breaks the layering, one line each."""
    out: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        importer = _module_name(path)
        own = _layer(importer)
        for line, imported in _targets(path):
            where = f"{path.relative_to(ROOT.parent)}:{line}"
            theirs = _layer(imported)
            if theirs > own:
                out.append(f"{where}: {importer} (layer {own}) imports {imported} (layer {theirs})")
            rule = _forbidden(importer, imported)
            if rule:
                out.append(f"{where}: {importer} imports {imported}: {rule}")
    return out


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()
             if (p.is_file() and p.suffix == ".py") or (p / "__init__.py").is_file()}
    assert parts <= set(LAYERS), f"give these a layer in LAYERS: {sorted(parts - set(LAYERS))}"


def test_modules_import_only_their_layer_or_lower() -> None:
    violations = layer_violations()
    assert not violations, "layering violations:\n  " + "\n  ".join(violations)


def test_the_check_sees_an_upward_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The static check is not vacuous: an adapter imported from the engine, also inside a
    function and under TYPE_CHECKING, and the pipeline imported from a signal, are found."""
    fake = tmp_path / PACKAGE
    (fake / "engine" / "signals").mkdir(parents=True)
    (fake / "processor").mkdir()
    for name in ("__init__.py", "engine/__init__.py", "engine/pipeline.py", "engine/signals/__init__.py",
                 "processor/__init__.py"):
        (fake / name).write_text("")
    (fake / "engine" / "leak.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..processor import x\n"
        "def f():\n    import otel_progress.processor\n"
    )
    (fake / "engine" / "signals" / "bad.py").write_text("from ..pipeline import Pipeline\nfrom .. import Thing\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake)
    found = layer_violations()
    assert any("engine.leak" in v and ":3:" in v and "processor" in v for v in found), found
    assert any("engine.leak" in v and ":5:" in v and "processor" in v for v in found), found
    assert any("engine.signals.bad" in v and "engine.pipeline" in v for v in found), found
    assert any("engine.signals.bad" in v and "__init__" in v for v in found), found


_PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(sys.modules)))
"""


def _loaded(module: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", _PROBE, module], capture_output=True, text=True, check=False,
                          cwd=ROOT.parent)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def public_api() -> set[str]:
    """What importing the package alone loads. Importing any subpackage runs the package's
    ``__init__`` first (layer 5, but it is the public API): it imports the engine and what
    the engine imports, never the adapters (those it imports lazily, on first use)."""
    return set(_loaded(PACKAGE))


def test_the_public_api_loads_the_engine_and_no_adapter(public_api: set[str]) -> None:
    parts = {m.split(".")[1] for m in public_api if m.startswith(PACKAGE + ".")}
    assert "engine" in parts
    above = sorted(p for p in parts if LAYERS[p] > LAYERS["engine"])
    assert not above, f"importing {PACKAGE} loads parts above the engine's layer: {above}"
    heavy = [m for m in public_api if any(_covers(h, m) for h in HEAVY)]
    assert not heavy, f"importing {PACKAGE} loads {heavy}"


@pytest.mark.parametrize("part", LOWER_PACKAGES)
def test_importing_a_lower_layer_loads_nothing_above_it(part: str, public_api: set[str]) -> None:
    loaded = _loaded(f"{PACKAGE}.{part}")
    heavy = [m for m in loaded if any(_covers(h, m) for h in HEAVY)]
    assert not heavy, f"importing {PACKAGE}.{part} loads {heavy}"
    # Above this part's layer, only what the public API loads anyway.
    above = sorted(m for m in loaded if _covers(PACKAGE, m) and m != PACKAGE and m not in public_api
                   and _layer(m[len(PACKAGE) + 1:]) > LAYERS[part])
    assert not above, f"importing {PACKAGE}.{part} loads modules of a higher layer: {above}"
