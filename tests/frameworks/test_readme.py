"""The README's "Works with" table lists every set-up of the matrix as it is tested."""

from __future__ import annotations

from .harness import ROOT, discover, works_with_row


def test_readme_lists_every_setup_with_its_versions() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "## Works with" in readme
    section = readme.split("## Works with", 1)[1].split("\n## ", 1)[0]
    missing = [s.id for s in discover() if works_with_row(s) not in section]
    assert not missing, ("README 'Works with' rows out of date for " + ", ".join(missing)
                         + "; regenerate with: python -m tests.frameworks.harness works-with")
