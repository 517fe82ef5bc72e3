"""The matrix harness itself: the setups.toml format, the virtualenv key, how build
failures are classified and how runs are judged (no virtualenv, no network)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from . import venvs
from .harness import Run, Setup, SetupError, discover, is_tool_span, venv_path


def _framework(root: Path, toml: str, name: str = "demo", requirements: str = "pkg==1.0\n") -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "agent.py").write_text("print('hi')\n")
    (d / "requirements.txt").write_text(requirements)
    (d / "setups.toml").write_text(textwrap.dedent(toml))
    return d


def test_the_python_keys_of_a_setup(tmp_path: Path) -> None:
    # the rest of the setups.toml format is both matrices': tests/_matrix/test_rows.py
    d = _framework(tmp_path, """
        [[setup]]
        name = "a"
        instrumentation = "A"
        requirements = "requirements-b.txt"
        tool_span_names = "^step$"
        warning = "no content"
    """)
    (d / "requirements-b.txt").write_text("pkg==2.0\n")
    (a,) = discover(tmp_path)
    assert (a.requirements_path, a.tool_span_names, a.warning, a.timeout) == (d / "requirements-b.txt", "^step$",
                                                                             "no content", 240.0)
    (d / "requirements-b.txt").unlink()
    with pytest.raises(SetupError, match=r"no requirements file requirements-b\.txt"):
        discover(tmp_path)


def test_the_virtualenv_key_follows_the_requirements_not_the_checkout(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    req = _framework(tmp_path, '[[setup]]\nname = "a"\ninstrumentation = "A"\n') / "requirements.txt"
    first = venv_path(req)
    assert first.name.startswith("demo-default-")
    pyproject = (venvs.ROOT / "pyproject.toml").read_text()
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "pyproject.toml").write_text(pyproject)
    monkeypatch.setattr(venvs, "ROOT", clone)  # another checkout of the same project: same key
    assert venv_path(req) == first
    extra = pyproject.replace('test = [\n', 'test = [\n    "something-new>=1",\n', 1)
    assert extra != pyproject
    (clone / "pyproject.toml").write_text(extra)  # the test extra changed: nothing to rebuild
    assert venv_path(req) == first
    deps = pyproject.replace('dependencies = [\n', 'dependencies = [\n    "something-new>=1",\n', 1)
    assert deps != pyproject
    (clone / "pyproject.toml").write_text(deps)  # a runtime dependency changed: rebuild
    assert venv_path(req) != first
    (clone / "pyproject.toml").write_text(pyproject)
    req.write_text("pkg==1.1\n")  # a pin changed
    assert venv_path(req) != first


def test_network_failures_skip_locally_but_bad_pins_do_not() -> None:
    assert venvs._NETWORK_ERRORS.search("Max retries exceeded with url: /simple/pkg/")
    assert not venvs._NETWORK_ERRORS.search("ERROR: No matching distribution found for pkg==9.9")


def _run(spans: list[dict[str, object]], stderr: str = "") -> Run:
    setup = Setup(framework="demo", name="a", instrumentation="A")
    return Run(setup, "loop", 0, "", stderr, spans, 0.1)  # type: ignore[arg-type]


def test_tool_spans_flags_and_crashes_are_judged_from_the_exported_spans() -> None:
    tool = {"name": "t", "attributes": {"openinference.span.kind": "TOOL"},
            "events": [{"name": "no_progress", "attributes": {"progress.reason": "barren"}}]}
    step = {"name": "BaseWorkflowAgent.task", "attributes": {"traceloop.span.kind": "task", "tool.name": "x"}}
    other = {"name": "chain", "attributes": {"traceloop.span.kind": "task"}, "events": []}
    run = _run([tool, step, other], stderr="Traceback (most recent call last):\n  File \"x/otel_progress/a.py\"\n"
                                           "ValueError\nTraceback (most recent call last):\n  File \"lib.py\"\n")
    assert [s["name"] for s in run.tool_spans()] == ["t", "BaseWorkflowAgent.task"]
    assert run.flagged() == [tool]
    assert len(run.crashes()) == 1  # only the traceback through otel-progress
    assert not is_tool_span(other)
