"""The JavaScript matrix harness itself: the setups.toml and package.json checks, the install
key, the shared script against the Python matrix's, and how spans are told to be tool calls
(no npm install, no Collector)."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from otel_progress.conventions.spans import SpanRecord
from tests._matrix.rows import load_script

from . import envs
from .rows import SETUPS_DIR, SetupError, discover, table_pins
from .runs import is_tool_span

_PACKAGE = {"name": "demo", "private": True, "dependencies": {"ai": "7.0.1", "zod": "4.6.7"}}


def _framework(root: Path, toml: str, package: dict | None = None, lock: bool = True) -> Path:
    d = root / "demo"
    d.mkdir(parents=True)
    (d / "agent.mjs").write_text("console.log('hi')\n")
    (d / "package.json").write_text(json.dumps(package or _PACKAGE))
    if lock:
        (d / "package-lock.json").write_text("{}")
    (d / "setups.toml").write_text(textwrap.dedent(toml))
    return d


def test_the_js_keys_of_a_setup(tmp_path: Path) -> None:
    # the rest of the setups.toml format is both matrices': tests/_matrix/test_rows.py
    _framework(tmp_path, """
        pins = ["ai"]
        [[setup]]
        name = "a"
        instrumentation = "A"
        settings = "experimental_telemetry"
    """)
    (a,) = discover(tmp_path)
    assert (a.settings, a.timeout, table_pins(a)) == ("experimental_telemetry", 180.0, ["ai 7.0.1"])


@pytest.mark.parametrize(("package", "lock", "message"), [
    ({"dependencies": {"ai": "^7.0.1"}}, True, "not pinned to an exact version"),
    ({"dependencies": {"ai": "latest"}}, True, "not pinned"),
    ({"dependencies": {}}, True, "no dependencies"),
    (None, False, "no package-lock.json"),
])
def test_loose_pins_and_missing_lockfiles_are_rejected(tmp_path: Path, package: dict | None, lock: bool,
                                                       message: str) -> None:
    _framework(tmp_path, '[[setup]]\nname = "a"\ninstrumentation = "A"\n', package, lock)
    with pytest.raises(SetupError, match=message):
        discover(tmp_path)


def test_the_install_key_follows_package_and_lockfile_not_the_checkout(tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is needed for the key")
    a = _framework(tmp_path / "one", '[[setup]]\nname = "a"\ninstrumentation = "A"\n')
    b = _framework(tmp_path / "two", '[[setup]]\nname = "a"\ninstrumentation = "A"\n')
    assert envs.env_path(a) == envs.env_path(b)
    (b / "package-lock.json").write_text('{"lockfileVersion": 3}')
    assert envs.env_path(a) != envs.env_path(b)


def test_the_js_script_is_the_python_matrix_script() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH")
    code = ("import('./scripted.mjs').then(m => console.log(JSON.stringify(Object.fromEntries("
            "m.SCENARIOS.map(s => [s, {script: m.script(s), final: m.nextStep(s, 99), "
            "results: m.script(s).map(([t, a]) => m.TOOLS[t](a))}])))))")
    out = subprocess.run([node, "-e", code], cwd=SETUPS_DIR / "_common", capture_output=True, text=True, timeout=60,
                         check=True).stdout
    js = json.loads(out)
    scripted = load_script()
    for scenario in scripted.SCENARIOS:
        steps = [[name, args] for name, args in scripted.script(scenario)]
        assert js[scenario]["script"] == steps
        assert js[scenario]["final"] == scripted.FINAL[scenario]
        assert js[scenario]["results"] == [json.loads(scripted.TOOLS[n](**a)) for n, a in scripted.script(scenario)]


def test_the_js_model_script_is_the_python_matrix_model_script() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH")
    code = ("import('./scripted.mjs').then(m => console.log(JSON.stringify({scenarios: m.MODEL_SCENARIOS, "
            "rejection: m.REJECTION, scripts: Object.fromEntries(m.MODEL_SCENARIOS.map(s => [s, m.modelScript(s)])), "
            "accepted: m.modelScript('text_loop').map(x => x.text && m.answerAccepted(x.text))})))")
    out = subprocess.run([node, "-e", code], cwd=SETUPS_DIR / "_common", capture_output=True, text=True, timeout=60,
                         check=True).stdout
    js = json.loads(out)
    scripted = load_script()
    assert js["scenarios"] == list(scripted.MODEL_SCENARIOS)
    assert js["rejection"] == scripted.REJECTION
    for scenario in scripted.MODEL_SCENARIOS:
        moves = [{**m, "tool": list(m["tool"]) if m["tool"] else None} for m in scripted.model_script(scenario)]
        assert js["scripts"][scenario] == moves, scenario
    assert js["accepted"] == [bool(m["text"] and scripted.answer_accepted(m["text"]))
                              for m in scripted.model_script("text_loop")]


@pytest.mark.parametrize(("attributes", "tool"), [
    ({"ai.operationId": "ai.toolCall"}, True),
    ({"ai.operationId": "ai.generateText.doGenerate"}, False),
    ({"gen_ai.operation.name": "execute_tool"}, True),
    ({"openinference.span.kind": "TOOL"}, True),
    ({"openinference.span.kind": "LLM"}, False),
    ({"traceloop.span.kind": "tool"}, True),
    ({}, False),
])
def test_tool_spans_are_told_by_the_instrumentations_own_markers(attributes: dict, tool: bool) -> None:
    assert is_tool_span(SpanRecord("t" * 32, "s" * 16, attributes=attributes)) is tool


def test_every_framework_directory_has_its_lockfile() -> None:
    for setup in discover():
        assert (setup.directory / "package-lock.json").is_file(), setup.id
