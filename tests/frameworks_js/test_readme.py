"""The README's JavaScript "Works with" table lists every set-up of the JS matrix as it is tested."""

from __future__ import annotations

from .rows import ROOT, discover, works_with_row


def test_readme_lists_every_js_setup_with_its_versions() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "### JavaScript and TypeScript agents" in readme
    section = readme.split("### JavaScript and TypeScript agents", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    missing = [s.id for s in discover() if works_with_row(s) not in section]
    assert not missing, ("README JavaScript 'Works with' rows out of date for " + ", ".join(missing)
                         + "; regenerate with: python -m tests.frameworks_js.harness works-with")
