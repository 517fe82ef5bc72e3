"""The pytest side of both matrices: a test per set-up and scenario, and what a test does
when its cached tree cannot be had."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from .builds import BuildFailed, in_ci
from .rows import AWAITING_ISSUE_29, SCENARIOS, MatrixSetup


def setup_params(setups: Iterable[MatrixSetup]) -> list[Any]:
    """``(setup, scenario)`` parameters, id ``<framework>/<setup>/<scenario>``, for the three
    scenarios and the set-up's ``model_scenarios``; a scenario in a working set-up's ``xfail``
    is a strict xfail with the defect as its reason, and so is a model-scenario row whose
    expectation is not met yet (:data:`tests._matrix.rows.AWAITING_ISSUE_29`)."""
    out = []
    for setup in setups:
        for scenario in SCENARIOS + setup.model_scenarios:
            marks = []
            if setup.works and scenario in setup.xfail:
                marks.append(pytest.mark.xfail(reason=setup.xfail[scenario], strict=True))
            elif setup.works and f"{setup.id}/{scenario}" in AWAITING_ISSUE_29:
                marks.append(pytest.mark.xfail(reason=AWAITING_ISSUE_29[f"{setup.id}/{scenario}"], strict=True))
            out.append(pytest.param(setup, scenario, id=f"{setup.id}/{scenario}", marks=marks))
    return out


def built_or_fail(get: Callable[[], Path], unreachable: str) -> Path:
    """``get()``'s cache directory. A build that fails fails the test; locally, one that
    failed because the index was unreachable skips it, saying ``unreachable: <error>``
    (never under CI=true)."""
    try:
        return get()
    except BuildFailed as exc:
        if exc.network and not in_ci():
            pytest.skip(f"{unreachable}: {exc}")
        pytest.fail(str(exc), pytrace=False)
