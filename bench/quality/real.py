"""The scoreboard's real-runs section: otel-progress and the baselines on real agent runs.

otel-progress runs through ``otel-progress scan --format json`` on the real files (a
subprocess, as users run it) and through ``ProgressSpanProcessor`` (each trace replayed
span by span through the SDK); the baselines through their monitors on the same calls,
one step per model turn. For every source (harness) and over all of them: runs flagged
among passing and among failing runs, detections per reason, the first detection against
the run's length, the calls left after it, and the labelled loops caught inside the call
window in which they are provable. The hand labels (``real_labels.yaml``) give
otel-progress's precision and the loops.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

from .baselines.base import Detector
from .realruns import RealRun
from .scoreboard import panels_svg

__all__ = [
    "LABELS_FILE",
    "RealDetection",
    "RealScore",
    "chart_svg",
    "labelled",
    "load_labels",
    "loops_caught",
    "markdown",
    "processor_detections",
    "scan_detections",
    "score_baseline",
    "score_ours",
    "stack_svgs",
    "table",
]

LABELS_FILE = Path(__file__).with_name("real_labels.yaml")


@dataclass(frozen=True)
class RealDetection:
    """One detection on a real run: where (run id, 1-based call index) and what."""

    run: str
    call: int
    reason: str
    level: int


@dataclass
class RealScore:
    """One detector on a set of real runs, per harness."""

    title: str
    # harness -> [passing runs, passing flagged, failing runs, failing flagged]
    runs: dict[str, list[int]] = field(default_factory=dict)
    ungraded: list[int] = field(default_factory=lambda: [0, 0])  # [runs, flagged] without a verdict
    reasons: Counter[str] = field(default_factory=Counter)
    calls_after: list[int] = field(default_factory=list)  # per flagged run
    turns_after: list[int] = field(default_factory=list)
    first: list[tuple[int, int]] = field(default_factory=list)  # (first detection's call, run length)
    detections: list[RealDetection] = field(default_factory=list)
    # run id -> the calls the detector alarmed on (every detection for otel-progress, the
    # first alarm for a baseline: they stop at their first)
    alarms: dict[str, list[int]] = field(default_factory=dict)

    def totals(self) -> list[int]:
        """[passing, passing flagged, failing, failing flagged] over every harness."""
        out = [0, 0, 0, 0]
        for row in self.runs.values():
            out = [a + b for a, b in zip(out, row, strict=True)]
        return out

    @property
    def passing_flagged_rate(self) -> float:
        p, pf, _, _ = self.totals()
        return pf / p if p else 0.0

    @property
    def failing_flagged_rate(self) -> float:
        _, _, f, ff = self.totals()
        return ff / f if f else 0.0

    @property
    def mean_turns_after(self) -> float:
        return sum(self.turns_after) / len(self.turns_after) if self.turns_after else 0.0

    @property
    def mean_calls_after(self) -> float:
        return sum(self.calls_after) / len(self.calls_after) if self.calls_after else 0.0

    def first_vs_length(self) -> str:
        """The mean first-detection call against the mean length of the flagged runs."""
        if not self.first:
            return "-"
        n = len(self.first)
        return f"{sum(c for c, _ in self.first) / n:.1f} of {sum(length for _, length in self.first) / n:.1f}"


def scan_detections(files: Sequence[Path], runs: Sequence[RealRun]) -> list[RealDetection]:
    """Detections of ``otel-progress scan --format json`` (defaults, a subprocess)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_PROGRESS_")}
    cmd = [sys.executable, "-m", "otel_progress.cli", "scan", "--format", "json", "--no-progress",
           *map(str, files)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"otel-progress scan failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    by_trace = {r.trace_id: r for r in runs}
    out: list[RealDetection] = []
    for line in proc.stdout.splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        run = by_trace.get(d["trace_id"])
        call = run.call_of(d["span_id"]) if run else None
        if run is not None and call is not None:
            out.append(RealDetection(run.id, call, d["reason"], int(d["level"])))
    return out


def processor_detections(files: Sequence[Path], runs: Sequence[RealRun]) -> list[RealDetection]:
    """Detections of ``ProgressSpanProcessor`` with the defaults, each trace replayed
    span by span through the OpenTelemetry SDK."""
    import gzip

    from otel_progress import Config

    from .ours import _replay

    by_trace = {r.trace_id: r for r in runs}
    out: list[RealDetection] = []
    for path in files:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                doc = json.loads(line)
                spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
                trace_id = spans[0]["traceId"] if spans else ""
                for span_id, det in _replay(SimpleNamespace(document=doc), Config()):  # type: ignore[arg-type]
                    run = by_trace.get(trace_id)  # (the SDK gave the replayed trace a new id)
                    call = run.call_of(span_id) if run else None
                    if run is not None and call is not None:
                        out.append(RealDetection(run.id, call, det.reason.value, int(det.level)))
    return out


def _tally(score: RealScore, runs: Sequence[RealRun]) -> RealScore:
    for run in runs:
        calls = score.alarms.get(run.id)
        flagged = bool(calls)
        if run.passed is None:
            score.ungraded[0] += 1
            score.ungraded[1] += flagged
        else:
            row = score.runs.setdefault(run.harness, [0, 0, 0, 0])
            if run.passed:
                row[0] += 1
                row[1] += flagged
            else:
                row[2] += 1
                row[3] += flagged
        if calls:
            call = min(calls)
            score.calls_after.append(len(run.calls) - call)
            turns = len({c.turn for c in run.calls})
            score.turns_after.append(turns - run.turn_of_call(call))
            score.first.append((call, len(run.calls)))
    return score


def score_ours(title: str, runs: Sequence[RealRun], detections: Sequence[RealDetection]) -> RealScore:
    """otel-progress's figures from its detections (those on ``runs``)."""
    ids = {r.id for r in runs}
    score = RealScore(title, detections=[d for d in detections if d.run in ids])
    for d in score.detections:
        score.reasons[d.reason] += 1
        score.alarms.setdefault(d.run, []).append(d.call)
    return _tally(score, runs)


def score_baseline(detector: Detector, runs: Sequence[RealRun]) -> RealScore:
    """A baseline's figures from its first alarm on each run (its call: the first call of
    the model turn it alarmed on)."""
    score = RealScore(detector.title)
    for run in runs:
        alarm = detector.first_alarm(run.as_corpus_run())
        if alarm is None:
            continue
        turns = sorted({c.turn for c in run.calls})
        turn = turns[alarm.turn - 1]
        score.alarms[run.id] = [next(c.index for c in run.calls if c.turn == turn)]
        score.reasons[detector.name] += 1
    return _tally(score, runs)


def rescore(score: RealScore, runs: Sequence[RealRun]) -> RealScore:
    """The same detector's figures restricted to ``runs`` (one source)."""
    ids = {r.id for r in runs}
    out = RealScore(score.title, detections=[d for d in score.detections if d.run in ids])
    out.alarms = {k: v for k, v in score.alarms.items() if k in ids}
    if score.detections:
        out.reasons = Counter(d.reason for d in out.detections)
    else:  # a baseline: one alarm per flagged run, under its name
        out.reasons = Counter({name: len(out.alarms) for name in score.reasons})
    return _tally(out, runs)


def load_labels(path: Path = LABELS_FILE) -> dict[str, Any]:
    """The hand labels: ``loops`` (run, window, why), ``detections`` (run, call, verdict,
    why) and ``no_detection`` (run, verdict, why)."""
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    return {key: list(data.get(key) or []) for key in ("loops", "detections", "no_detection")}


def labelled(detections: Sequence[RealDetection], labels: Mapping[str, Any]) -> dict[str, list[RealDetection]]:
    """Detections sorted by their label: ``real_loop``, ``false_alarm``, ``unlabelled``."""
    verdicts = {(e["run"], int(e["call"])): e["verdict"] for e in labels["detections"]}
    out: dict[str, list[RealDetection]] = {"real_loop": [], "false_alarm": [], "unlabelled": []}
    for d in detections:
        out.setdefault(verdicts.get((d.run, d.call), "unlabelled"), []).append(d)
    return out


def window(entry: Mapping[str, Any]) -> tuple[int, int]:
    """The call window of a labelled loop: the first call at which it is provable, the
    last call of the loop."""
    first, last = entry["window"]
    return int(first), int(last)


def loops_caught(score: RealScore, loops: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """(labelled loops with an alarm inside their window, labelled loops) among ``loops``
    whose run the score covers."""
    caught = total = 0
    for entry in loops:
        first, last = window(entry)
        total += 1
        caught += any(first <= c <= last for c in score.alarms.get(entry["run"], ()))
    return caught, total


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f}%)" if d else "-"


def table(scores: Sequence[RealScore], loops: Sequence[Mapping[str, Any]]) -> str:
    """The markdown table: per detector, flagged passing and failing runs, labelled loops
    caught inside their window, first detection against run length, calls after it."""
    lines = ["| Detector | passing runs flagged | failing runs flagged | labelled loops caught in window"
             " | first detection at call (mean, of run length) | calls after first detection (mean) |",
             "|---|---:|---:|---:|---:|---:|"]
    for s in scores:
        p, pf, f, ff = s.totals()
        caught, total = loops_caught(s, loops)
        lines.append(f"| {s.title} | {_pct(pf, p)} | {_pct(ff, f)} | {_pct(caught, total)} | {s.first_vs_length()}"
                     f" | {s.mean_calls_after:.1f} |")
    return "\n".join(lines)


def _precision(detections: Sequence[RealDetection], labels: Mapping[str, Any]) -> str:
    sorted_labels = labelled(detections, labels)
    real, false, unl = (len(sorted_labels[k]) for k in ("real_loop", "false_alarm", "unlabelled"))
    total = len(detections)
    if not total:
        return "no detection"
    return (f"{real} of {total} detections are real loops ({100 * real / total:.0f}%); {false} labelled false"
            f" alarms, {unl} unlabelled")


def _source_section(harness: str, runs: Sequence[RealRun], scores: Sequence[RealScore],
                    labels: Mapping[str, Any]) -> list[str]:
    ids = {r.id for r in runs}
    loops = [e for e in labels["loops"] if e["run"] in ids]
    subset = [rescore(s, runs) for s in scores]
    ours = subset[0]
    ungraded = f", {ours.ungraded[0]} ungraded ({ours.ungraded[1]} flagged)" if ours.ungraded[0] else ""
    p, _, f, _ = ours.totals()
    return [
        f"### {harness}",
        "",
        f"{len(runs)} runs ({p} passing, {f} failing{ungraded}), {sum(len(r.calls) for r in runs)} tool calls;"
        f" {len(loops)} labelled loops.",
        "",
        table(subset, loops),
        "",
        f"otel-progress (scan): {_precision(ours.detections, labels)}. Detections per reason: "
        + (", ".join(f"`{k}` {v}" for k, v in sorted(ours.reasons.items())) or "none") + ".",
        "",
    ]


def markdown(runs: Sequence[RealRun], scores: Sequence[RealScore], labels: Mapping[str, Any],
             files: Sequence[Path], consistency: Sequence[str], figures: Sequence[str] = ()) -> str:
    """The real-runs section of RESULTS.md (``figures``: lines put before the tables)."""
    harnesses = sorted({r.harness for r in runs})
    ours = scores[0]
    p, pf, f, ff = ours.totals()
    misses = [e for e in labels["no_detection"] if e.get("verdict") == "missed_loop"]
    caught, total = loops_caught(ours, labels["loops"])
    parts = [
        "## Real runs",
        "",
        f"{len(runs)} real runs written by others ({', '.join(harnesses)}; files"
        f" {', '.join(x.name for x in files)} in `../shared/realtraces/`, not part of the project), with the"
        " benchmark's verdict on each. otel-progress with the default configuration, no manifest,"
        " through `otel-progress scan` (first row) and `ProgressSpanProcessor` (second row); the"
        " baselines on the same calls, one step per model turn. A failing run is not necessarily a"
        " loop: flagged failing runs are an upper bound on recall, flagged passing runs a lower bound"
        " on false alarms (a passing run can loop for a while and recover). A labelled loop is caught"
        " when an alarm falls inside the call window in which it is provable (`real_labels.yaml`);"
        " a baseline is judged by its first alarm only (it stops there).",
        "",
        *figures,
        "### All real runs",
        "",
        table(scores, labels["loops"]),
        "",
        f"**By the hand labels** (`bench/quality/real_labels.yaml` and the SWE-bench label files, rules in the"
        f" README):"
        f" otel-progress (scan): {_precision(ours.detections, labels)}; labelled loops caught in their window:"
        f" {_pct(caught, total)}. Passing runs flagged: {_pct(pf, p)}; failing runs flagged: {_pct(ff, f)}."
        f" Calls after the first detection (mean over flagged runs): {ours.mean_calls_after:.1f}. Labelled runs"
        f" without a detection: {len(labels['no_detection'])}, of which {len(misses)} are missed loops.",
        "",
        "Detections per reason (otel-progress, scan): "
        + (", ".join(f"`{k}` {v}" for k, v in sorted(ours.reasons.items())) or "none") + ".",
        "",
    ]
    for harness in harnesses:
        parts += _source_section(harness, [r for r in runs if r.harness == harness], scores, labels)
    parts += ["### Every detection (otel-progress, scan)", "",
              "| Run | Call | Reason | Level | Label |", "|---|---:|---|---:|---|"]
    verdicts = {(e["run"], int(e["call"])): e["verdict"] for e in labels["detections"]}
    for d in ours.detections:
        parts.append(f"| `{d.run}` | {d.call} | {d.reason} | {d.level} | {verdicts.get((d.run, d.call), '?')} |")
    parts += ["", *(consistency or ["The scan and the processor agree on every detection."]), ""]
    return "\n".join(parts)


_SIZE = re.compile(r'<svg[^>]*?width="(\d+)" height="(\d+)"')


def chart_svg(scores: Sequence[RealScore], ours_titles: Sequence[str], loops: Sequence[Mapping[str, Any]],
              heading: str = "Loop detectors on real agent runs") -> str:
    """Three panels: labelled loops caught in their window, passing runs flagged, calls
    after the first detection."""
    most = max((s.mean_calls_after for s in scores), default=1.0) or 1.0

    def caught(s: RealScore) -> float:
        n, d = loops_caught(s, loops)
        return n / d if d else 0.0

    panels = (
        ("Labelled loops caught in window|higher is better", caught, lambda s: f"{100 * caught(s):.0f}%", 1.0),
        ("Passing runs flagged|lower is better", lambda s: s.passing_flagged_rate,
         lambda s: f"{100 * s.passing_flagged_rate:.0f}%", 1.0),
        ("Calls after the first detection|mean over flagged runs", lambda s: s.mean_calls_after,
         lambda s: f"{s.mean_calls_after:.1f}", most),
    )
    return panels_svg(scores, ours_titles, heading, panels)


def stack_svgs(first: str, *more: str) -> str:
    """SVG documents one above the other, in one document."""
    docs = [first, *more]
    sizes = [tuple(int(v) for v in _SIZE.search(doc).groups()) for doc in docs]  # type: ignore[union-attr]
    width, height = max(w for w, _ in sizes), sum(h for _, h in sizes)
    inner, y = [], 0
    for doc, (_, h) in zip(docs, sizes, strict=True):
        inner.append(doc.replace("<svg ", f'<svg y="{y}" ', 1) if y else doc)
        y += h
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">\n{"".join(inner)}</svg>\n')
