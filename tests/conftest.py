"""Test order: the groups that wait for something built or installed run last.

``python -m pytest`` collects ``tests/`` alphabetically, which would start with the groups
that need the most set-up (the coding CLIs from npm, the Collector built with Go) and
leave the quick ones for the end. The set-up of those groups can run in the background
meanwhile (``.ci/run`` starts the Collector build and the framework virtualenvs first
thing; their fixtures wait for a build in progress instead of starting a second one), so
every other group runs first, then, in this order, the ones in :data:`LAST`. Files keep
their order within a group, so module and session fixtures are unaffected.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

#: Groups (directories under tests/) run after all others, in this order.
LAST = ("coding_agents", "collector", "e2e", "frameworks_js", "frameworks")


def _rank(item: pytest.Item) -> int:
    try:
        group = Path(str(item.path)).resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return 0
    return LAST.index(group) + 1 if group in LAST else 0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: the order within a group is kept
