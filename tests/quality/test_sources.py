"""The Wilson score interval and the per-source figures (``bench/quality/sources.py``)."""

from __future__ import annotations

import pytest

from bench.quality import sources
from bench.quality.gate import GateRun
from bench.quality.real import RealDetection


@pytest.mark.parametrize(("k", "n", "lo", "hi"), [
    # Wilson (1927) score interval, z = 1.96 (as in R's prop.test(correct = FALSE), statsmodels'
    # proportion_confint(method="wilson") and Newcombe 1998, table I)
    (0, 10, 0.0, 0.2775),
    (10, 10, 0.7225, 1.0),
    (5, 10, 0.2366, 0.7634),
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (1, 29, 0.0061, 0.1718),
])
def test_wilson_against_known_values(k: int, n: int, lo: float, hi: float) -> None:
    got = sources.wilson(k, n)
    assert got == pytest.approx((lo, hi), abs=5e-5)


def test_wilson_without_trials_is_the_whole_range() -> None:
    assert sources.wilson(0, 0) == (0.0, 1.0)


def test_figures_per_source() -> None:
    runs = [GateRun("a", "h", True), GateRun("b", "h", False), GateRun("c", "h", True), GateRun("d", "g", False)]
    labels = {
        "loops": [{"run": "b", "window": [4, 8]}, {"run": "b", "window": [20, 22]}, {"run": "d", "window": [2, 3]}],
        "no_loop": [{"run": "a"}, {"run": "c"}],
        "detections": [{"run": "b", "call": 6, "verdict": "real_loop"},
                       {"run": "a", "call": 2, "verdict": "false_alarm"},
                       {"run": "b", "call": 30, "verdict": "borderline"}],
    }
    dets = [RealDetection("b", 6, "repeat_cycle", 1), RealDetection("b", 7, "repeat_cycle", 2),
            RealDetection("a", 2, "barren", 1), RealDetection("b", 30, "barren", 1), RealDetection("d", 9, "barren", 1)]
    h, g, everything = sources.figures(runs, dets, labels)
    assert (h.source, g.source, everything.source) == ("h", "g", "all sources")
    assert h.loops_caught == sources.Rate(1, 2)
    assert h.no_loop_flagged == sources.Rate(1, 2)
    assert h.passing_flagged == sources.Rate(1, 2)
    assert h.precision == sources.Precision(real=1, false_alarm=1, borderline=1, unreviewed=1)
    assert h.calls_to_detection == (2,) and h.median_calls == 2
    assert g.loops_caught == sources.Rate(0, 1) and g.passing_flagged.n == 0 and g.median_calls is None
    assert everything.loops_caught == sources.Rate(1, 3) and everything.detections == 5
    assert str(sources.Rate(5, 10)) == "5/10 50% [24–76%]"
    assert str(sources.Rate(0, 0)) == "-"
