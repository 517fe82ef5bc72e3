"""Test order, and the slow set-up started in the background.

``python -m pytest`` collects ``tests/`` alphabetically, which would start with the groups
that need the most set-up (the coding CLIs from npm, the Collector built with Go) and
leave the quick ones for the end. Once the tests are collected, the builds the selected
tests need and that are not cached yet (the Collector, the framework virtualenvs, the
JavaScript matrix's npm trees) are started in the background (:mod:`tests._background`;
their fixtures wait for a build in progress instead of starting a second one), and every
other group runs first, then, in this order, the ones in :data:`LAST`. Files keep their
order within a group, so module and session fixtures are unaffected.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._background import group_of, start_needed

try:  # Hypothesis' per-example deadline is a timed test: the machines are shared and noisy
    from hypothesis import settings

    settings.register_profile("otel-progress", deadline=None)
    settings.load_profile("otel-progress")
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    pass

TESTS = Path(__file__).resolve().parent

#: Groups (directories under tests/) run after all others, in this order.
LAST = ("coding_agents", "collector", "e2e", "frameworks_js", "frameworks")


def _rank(item: pytest.Item) -> int:
    group = group_of(item)
    return LAST.index(group) + 1 if group in LAST else 0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: the order within a group is kept


def pytest_collection_finish(session: pytest.Session) -> None:
    start_needed(session)  # (the selection is final here: after -k, -m and deselection)
