"""``python -m bench.quality.gate``: the detection-quality gate of CI.

Runs the engine in process (``analyse_trace`` with the default configuration, one fresh
:class:`ProgressEngine` per trace, as ``otel-progress scan`` does) over the labelled real
runs of ``../shared/realtraces`` (``dev.jsonl.gz``, ``added/``, ``swebench/``), computes
the labelled figures of each source (:mod:`bench.quality.sources`) and compares them with
the floors written beside this file in ``floors.yaml``. Prints one line per source and
figure (floor, value, Wilson 95 % interval) and exits 1 when a figure is on the wrong side
of its floor, 0 otherwise; when the real runs are absent it says it skipped and exits 0.

``--suggest`` prints floors from today's figures (the point estimates with one loop, run
or detection of room), the body of a new ``floors.yaml``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .labels import load_all_labels
from .real import RealDetection
from .realruns import REAL_DIR, real_files
from .sources import Rate, SourceFigures, figures

FLOORS_FILE = Path(__file__).with_name("floors.yaml")

#: floor name -> (figure, direction): "min" fails below the floor, "max" above it.
FIGURES: dict[str, tuple[str, str]] = {
    "loops_caught_min": ("labelled loops caught in window", "min"),
    "no_loop_flagged_max": ("labelled no-loop runs flagged", "max"),
    "passing_flagged_max": ("passing runs flagged", "max"),
    "precision_min": ("precision (hand review)", "min"),
}


@dataclass(frozen=True)
class GateRun:
    """What the figures need of a run."""

    id: str
    harness: str
    passed: bool | None


def measure(files: Sequence[Path], config: Any = None) -> tuple[list[GateRun], list[RealDetection]]:
    """The runs of ``files`` and the engine's detections on them (call: 1-based index of
    the tool call in start order; a detection on no tool span is left out, as the scan
    path of the scoreboard leaves it)."""
    from bench.bench_engine import iter_traces
    from otel_progress import Config, ProgressEngine
    from otel_progress.scan.analyse import analyse_trace

    config = Config() if config is None else config
    runs: list[GateRun] = []
    detections: list[RealDetection] = []
    for _, spans in iter_traces(files):
        resource = next((s.resource for s in spans if s.resource), None) or {}
        passed = resource.get("realtraces.passed")
        run = GateRun(str(resource.get("realtraces.run_id") or spans[0].trace_id),
                      str(resource.get("realtraces.harness", "?")), None if passed is None else bool(passed))
        runs.append(run)
        tools = sorted((s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"),
                       key=lambda s: (s.start_ns, s.span_id))
        index = {s.span_id: i for i, s in enumerate(tools, 1)}
        for d in analyse_trace(spans, ProgressEngine(config)).detections:
            if d.span_id in index:
                detections.append(RealDetection(run.id, index[d.span_id], d.reason.value, int(d.level)))
    return runs, detections


def load_floors(path: Path = FLOORS_FILE) -> dict[str, dict[str, float]]:
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


def _rate(f: SourceFigures, floor: str) -> Rate:
    return {"loops_caught_min": f.loops_caught, "no_loop_flagged_max": f.no_loop_flagged,
            "passing_flagged_max": f.passing_flagged, "precision_min": f.precision.rate}[floor]


@dataclass(frozen=True)
class Check:
    source: str
    floor_name: str
    floor: float
    rate: Rate | None  # None: the source is absent from the runs

    @property
    def ok(self) -> bool:
        if self.rate is None or self.rate.value is None:
            return False
        if FIGURES[self.floor_name][1] == "min":
            return self.rate.value >= self.floor - 1e-9
        return self.rate.value <= self.floor + 1e-9

    def __str__(self) -> str:
        figure, direction = FIGURES[self.floor_name]
        sign = ">=" if direction == "min" else "<="
        value = "absent" if self.rate is None else str(self.rate)
        return (f"{'ok  ' if self.ok else 'FAIL'} {self.source}: {figure} {value}"
                f" (floor {sign} {100 * self.floor:.0f}%)")


def check(rows: Sequence[SourceFigures], floors: Mapping[str, Mapping[str, float]]) -> list[Check]:
    """Each floor of each source against its figure."""
    by_source = {f.source: f for f in rows}
    out: list[Check] = []
    for source, limits in floors.items():
        f = by_source.get(source)
        for name, floor in limits.items():
            if name not in FIGURES:
                raise ValueError(f"{FLOORS_FILE.name}: {source}: unknown floor {name!r}")
            out.append(Check(source, name, float(floor), None if f is None else _rate(f, name)))
    return out


def suggest(rows: Sequence[SourceFigures]) -> str:
    """Floors from today's figures, one loop, run or detection of room each, rounded
    outwards to whole percents."""
    out: dict[str, dict[str, float]] = {}
    for f in rows:
        if f.source == "all sources":
            continue
        limits: dict[str, float] = {}
        for name, (_, direction) in FIGURES.items():
            rate = _rate(f, name)
            if not rate.n:
                continue
            if direction == "min":  # (integer arithmetic: 3/4 is 0.75, not 0.74)
                limits[name] = (100 * max(rate.k - 1, 0) // rate.n) / 100
            else:
                limits[name] = min(100, -(-100 * (rate.k + 1) // rate.n)) / 100
        if limits:
            out[f.source] = limits
    return yaml.safe_dump(out, sort_keys=False)


def compute(config: Any = None, files: Sequence[Path] | None = None) -> list[SourceFigures]:
    """The labelled figures of every source (overall row excluded)."""
    runs, detections = measure(real_files() if files is None else files, config)
    return figures(runs, detections, load_all_labels(), overall=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.gate", description=__doc__.splitlines()[0])
    parser.add_argument("--suggest", action="store_true", help="print floors from today's figures and exit")
    args = parser.parse_args(argv)
    files = real_files()
    if not files:
        print(f"quality gate: skipped: no real runs at {REAL_DIR} (the project does not ship them)")
        return 0
    start = time.perf_counter()
    rows = compute(files=files)
    if args.suggest:
        print(suggest(rows), end="")
        return 0
    checks = check(rows, load_floors())
    for c in checks:
        print(c)
    failed = [c for c in checks if not c.ok]
    print(f"quality gate: {len(checks) - len(failed)} of {len(checks)} figures within their floors"
          f" ({FLOORS_FILE.name}; {sum(f.runs for f in rows)} runs, {time.perf_counter() - start:.1f} s)")
    if failed:
        print("quality gate: FAILED: a change that lowers a figure must raise it back, or argue for a new"
              f" floor in review ({FLOORS_FILE})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
