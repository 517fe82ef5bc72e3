"""The ``setups.toml`` format both matrices read (:mod:`tests._matrix.rows`), through each
matrix's own ``discover``: the defaults, the xfail tables, and every malformed file rejected
with its reason (what only one matrix checks is tested in its ``test_harness.py``)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests._matrix.rows import AWAITING_ISSUE_29, MODEL_EXPECTED, MODEL_SCENARIOS, SCENARIOS, MatrixSetup, SetupError
from tests._matrix.testing import setup_params
from tests.frameworks import rows as python_rows
from tests.frameworks_js import rows as js_rows


@dataclass(frozen=True)
class Matrix:
    """One matrix's ``discover`` and what a framework directory of it holds besides setups.toml."""

    discover: Callable[[Path], list[MatrixSetup]]
    agent: str
    files: dict[str, str]
    timeout: float

    def write(self, root: Path, toml: str) -> Path:
        d = root / "demo"
        d.mkdir(parents=True, exist_ok=True)
        for name, text in {self.agent: "", **self.files, "setups.toml": textwrap.dedent(toml)}.items():
            (d / name).write_text(text)
        return d

    def read(self, root: Path, toml: str) -> list[MatrixSetup]:
        self.write(root, toml)
        return self.discover(root)


PYTHON = Matrix(python_rows.discover, "agent.py", {"requirements.txt": "pkg==1.0\n"}, python_rows.RUN_TIMEOUT_S)
JS = Matrix(js_rows.discover, "agent.mjs", {"package.json": json.dumps({"dependencies": {"ai": "7.0.1"}}),
                                            "package-lock.json": "{}"}, js_rows.RUN_TIMEOUT_S)


@pytest.fixture(params=[PYTHON, JS], ids=["python", "js"])
def matrix(request: pytest.FixtureRequest) -> Matrix:
    return request.param


def test_setups_are_read_with_defaults_and_xfail_tables(matrix: Matrix, tmp_path: Path) -> None:
    a, b, c = matrix.read(tmp_path, """
        title = "Demo"
        [[setup]]
        name = "a"
        instrumentation = "A"
        env = { X = 1 }
        args = ["--flag", 2]
        xfail = { loop = "defect 1" }
        [[setup]]
        name = "b"
        instrumentation = "B"
        status = "cannot"
        reason = "no content"
        [[setup]]
        name = "c"
        instrumentation = "C"
        xfail = "defect 2"
        timeout = 9
        min_tool_spans = 1
    """)
    assert (a.id, a.title, a.env, a.args, a.works, a.xfail) == ("demo/a", "Demo", {"X": "1"}, ("--flag", "2"), True,
                                                               {"loop": "defect 1"})
    assert (a.directory, a.timeout, a.min_tool_spans) == (tmp_path / "demo", matrix.timeout, 3)
    assert (b.works, b.reason, b.min_tool_spans, b.xfail) == (False, "no content", 3, {})
    assert (c.xfail, c.timeout, c.min_tool_spans) == (dict.fromkeys(SCENARIOS, "defect 2"), 9.0, 1)


def test_the_title_defaults_to_the_directory_name(matrix: Matrix, tmp_path: Path) -> None:
    (setup,) = matrix.read(tmp_path, '[[setup]]\nname = "a"\ninstrumentation = "A"\n')
    assert setup.title == "demo"


@pytest.mark.parametrize(("toml", "message"), [
    ('[[setup]]\nname = "a"\ninstrumentation = "A"\ncolour = "red"\n', "unknown keys"),
    ('[[setup]]\nname = "a"\ninstrumentation = "A"\nstatus = "cannot"\n', "needs a reason"),
    ('[[setup]]\nname = "a"\ninstrumentation = "A"\nstatus = "maybe"\n', "status must be"),
    ('[[setup]]\nname = "a"\ninstrumentation = "A"\nxfail = { later = "x" }\n', "xfail"),
    ('[[setup]]\ninstrumentation = "A"\n', "'name'"),
    ('[[setup]]\nname = "a"\ninstrumentation = "A"\nmodel_scenarios = ["text_lop"]\n', "model_scenarios"),
    ('[[setup]]\nname = "a"\ninstrumentation = "A"\nxfail = { text_loop = "x" }\n', "xfail"),
    ('[[setup]]\nname = "a"\ninstrumentation = ""\n', "'instrumentation'"),
    ('title = "T"\n', r"no \[\[setup\]\]"),
    ('colour = "red"\n[[setup]]\nname = "a"\ninstrumentation = "A"\n', "unknown top-level keys"),
    ('[[setup]]\nname = "a"\ninstrumentation = "A"\n[[setup]]\nname = "a"\ninstrumentation = "B"\n',
     "duplicate set-up names"),
])
def test_malformed_setups_are_rejected_with_the_reason(matrix: Matrix, tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(SetupError, match=message):
        matrix.read(tmp_path, toml)


def test_a_framework_without_its_agent_is_rejected(matrix: Matrix, tmp_path: Path) -> None:
    (matrix.write(tmp_path, '[[setup]]\nname = "a"\ninstrumentation = "A"\n') / matrix.agent).unlink()
    with pytest.raises(SetupError, match=f"no {matrix.agent}"):
        matrix.discover(tmp_path)


def test_model_scenarios_are_opt_in_and_their_pending_expectations_strict_xfails(
        matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = matrix.read(tmp_path, """
        [[setup]]
        name = "a"
        instrumentation = "A"
        model_scenarios = ["text_loop", "text_healthy", "unknown_tool"]
        xfail = { text_healthy = "defect 3" }
        [[setup]]
        name = "b"
        instrumentation = "B"
    """)
    assert (a.model_scenarios, b.model_scenarios) == (("text_loop", "text_healthy", "unknown_tool"), ())
    monkeypatch.setitem(AWAITING_ISSUE_29, "demo/a/text_loop", "a reader is missing")
    params = {p.id: p for p in setup_params([a, b])}
    assert list(params) == [f"demo/a/{s}" for s in (*SCENARIOS, "text_loop", "text_healthy", "unknown_tool")] + [
        f"demo/b/{s}" for s in SCENARIOS]
    marks = {i: [(m.kwargs["reason"], m.kwargs["strict"]) for m in p.marks] for i, p in params.items()}
    assert marks["demo/a/text_loop"] == [("a reader is missing", True)]
    assert marks["demo/a/text_healthy"] == [("defect 3", True)]
    assert marks["demo/a/unknown_tool"] == marks["demo/a/loop"] == []


def test_every_model_scenario_has_an_expectation_and_only_loops_of_real_rows_wait() -> None:
    from tests.frameworks import rows as python_rows
    from tests.frameworks_js import rows as js_rows

    assert set(MODEL_EXPECTED) == set(MODEL_SCENARIOS)
    assert {MODEL_EXPECTED[s] for s in ("text_loop", "reasoning_loop", "unknown_tool", "refused_tool")} == {
        "text_repeat", "unexecuted_repeat"}
    rows = {f"{s.id}/{m}" for s in [*python_rows.discover(), *js_rows.discover()] for m in s.model_scenarios}
    assert set(AWAITING_ISSUE_29) <= rows
    assert all(MODEL_EXPECTED[key.rsplit("/", 1)[1]] is not None for key in AWAITING_ISSUE_29)
