"""Per-source figures of otel-progress on the labelled real runs, each rate with its
Wilson 95 % score interval (issue 25's published figure).

One function per figure; each takes the runs of one source (anything with ``id``,
``harness`` and ``passed``), otel-progress's detections on them
(:class:`~bench.quality.real.RealDetection`: run id and 1-based call index) and the labels
(:func:`bench.quality.labels.load_all_labels`):

* :func:`loops_caught`: labelled loops with a detection at a call inside their window;
* :func:`no_loop_flagged`: runs labelled as holding no loop that get any detection;
* :func:`precision`: reviewed detections that are real, over those judged real or false
  alarm (borderline and unreviewed ones counted apart);
* :func:`passing_flagged`: passing (resolved) runs that get any detection;
* :func:`calls_to_detection`: per caught loop, calls from its window's start to the first
  detection inside the window (the figure is their median).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .real import RealDetection

__all__ = ["Precision", "Rate", "SourceFigures", "calls_to_detection", "figures", "loops_caught",
           "no_loop_flagged", "passing_flagged", "precision", "table", "wilson"]

Z95 = 1.959963984540054  # the 97.5th percentile of the standard normal


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials ((0, 1) when n = 0)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    scale = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / scale
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / scale
    return max(0.0, centre - half), min(1.0, centre + half)


class _Run(Protocol):
    id: str
    harness: str
    passed: bool | None


@dataclass(frozen=True)
class Rate:
    """``k`` of ``n``, with its Wilson 95 % interval."""

    k: int
    n: int

    @property
    def value(self) -> float | None:
        return self.k / self.n if self.n else None

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.k, self.n)

    def __str__(self) -> str:
        if not self.n:
            return "-"
        lo, hi = self.interval
        return f"{self.k}/{self.n} {100 * self.k / self.n:.0f}% [{100 * lo:.0f}–{100 * hi:.0f}%]"


@dataclass(frozen=True)
class Precision:
    """The hand review of one source's detections."""

    real: int
    false_alarm: int
    borderline: int
    unreviewed: int

    @property
    def rate(self) -> Rate:
        return Rate(self.real, self.real + self.false_alarm)

    def __str__(self) -> str:
        return f"{self.rate} (borderline {self.borderline}, not reviewed {self.unreviewed})"


@dataclass(frozen=True)
class SourceFigures:
    source: str
    runs: int
    detections: int
    loops_caught: Rate
    no_loop_flagged: Rate
    precision: Precision
    passing_flagged: Rate
    calls_to_detection: tuple[int, ...]

    @property
    def median_calls(self) -> float | None:
        return statistics.median(self.calls_to_detection) if self.calls_to_detection else None


def _calls(detections: Iterable[RealDetection]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for d in detections:
        out.setdefault(d.run, []).append(d.call)
    return out


def _ids(runs: Iterable[_Run]) -> set[str]:
    return {r.id for r in runs}


def _in_window(calls: Iterable[int], entry: Mapping[str, Any]) -> list[int]:
    first, last = (int(x) for x in entry["window"])
    return sorted(c for c in calls if first <= c <= last)


def loops_caught(runs: Sequence[_Run], detections: Sequence[RealDetection], labels: Mapping[str, Any]) -> Rate:
    """Labelled loops of ``runs`` with a detection at a call inside their window."""
    ids, calls = _ids(runs), _calls(detections)
    loops = [e for e in labels["loops"] if e["run"] in ids]
    return Rate(sum(bool(_in_window(calls.get(e["run"], ()), e)) for e in loops), len(loops))


def no_loop_flagged(runs: Sequence[_Run], detections: Sequence[RealDetection], labels: Mapping[str, Any]) -> Rate:
    """Runs of ``runs`` labelled as holding no loop that get any detection."""
    ids, flagged = _ids(runs), {d.run for d in detections}
    clean = {e["run"] for e in labels["no_loop"] if e["run"] in ids}
    return Rate(len(clean & flagged), len(clean))


def precision(runs: Sequence[_Run], detections: Sequence[RealDetection], labels: Mapping[str, Any]) -> Precision:
    """The detections on ``runs`` by their hand review (run and call)."""
    ids = _ids(runs)
    verdicts = {(e["run"], int(e["call"])): e["verdict"] for e in labels["detections"]}
    found = [verdicts.get((d.run, d.call)) for d in detections if d.run in ids]
    return Precision(found.count("real_loop"), found.count("false_alarm"), found.count("borderline"),
                     found.count(None))


def passing_flagged(runs: Sequence[_Run], detections: Sequence[RealDetection]) -> Rate:
    """Passing (resolved) runs with any detection."""
    flagged = {d.run for d in detections}
    passing = [r for r in runs if r.passed]
    return Rate(sum(r.id in flagged for r in passing), len(passing))


def calls_to_detection(runs: Sequence[_Run], detections: Sequence[RealDetection],
                       labels: Mapping[str, Any]) -> list[int]:
    """Per caught loop of ``runs``: the first detection inside its window minus the
    window's first call."""
    ids, calls = _ids(runs), _calls(detections)
    out: list[int] = []
    for e in labels["loops"]:
        if e["run"] in ids:
            inside = _in_window(calls.get(e["run"], ()), e)
            if inside:
                out.append(inside[0] - int(e["window"][0]))
    return out


def figures(runs: Sequence[_Run], detections: Sequence[RealDetection], labels: Mapping[str, Any],
            overall: bool = True) -> list[SourceFigures]:
    """Every figure per source (harness, in the order the runs come), then over all of
    them when ``overall``."""
    groups: dict[str, list[_Run]] = {}
    for r in runs:
        groups.setdefault(r.harness, []).append(r)
    if overall and len(groups) > 1:
        groups["all sources"] = list(runs)
    out: list[SourceFigures] = []
    for source, subset in groups.items():
        ids = _ids(subset)
        mine = [d for d in detections if d.run in ids]
        out.append(SourceFigures(source, len(subset), len(mine), loops_caught(subset, mine, labels),
                                 no_loop_flagged(subset, mine, labels), precision(subset, mine, labels),
                                 passing_flagged(subset, mine), tuple(calls_to_detection(subset, mine, labels))))
    return out


def table(rows: Sequence[SourceFigures]) -> str:
    """The markdown table: one row per source, each rate as ``k/n value% [Wilson 95 % interval]``."""
    lines = ["| Source | runs | detections | labelled loops caught in window | labelled no-loop runs flagged"
             " | precision (hand review) | borderline / not reviewed | passing runs flagged"
             " | calls from window start to detection (median) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for f in rows:
        median = "-" if f.median_calls is None else f"{f.median_calls:g}"
        lines.append(f"| {f.source} | {f.runs} | {f.detections} | {f.loops_caught} | {f.no_loop_flagged}"
                     f" | {f.precision.rate} | {f.precision.borderline} / {f.precision.unreviewed}"
                     f" | {f.passing_flagged} | {median} |")
    return "\n".join(lines)
