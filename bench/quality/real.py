"""The scoreboard's real-runs section: otel-progress and the baselines on real agent runs.

otel-progress runs through ``otel-progress scan --format json`` on the real files (a
subprocess, as users run it) and through ``ProgressSpanProcessor`` (each trace replayed
span by span through the SDK); the baselines through their monitors on the same calls,
one step per model turn. Per harness: runs flagged among passing and among failing runs,
detections per reason, and the calls and turns left after the first detection. The hand
labels (``real_labels.yaml``) give otel-progress's precision.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
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
    """One detector on the real runs, per harness."""

    title: str
    # harness -> [passing runs, passing flagged, failing runs, failing flagged]
    runs: dict[str, list[int]] = field(default_factory=dict)
    reasons: Counter[str] = field(default_factory=Counter)
    calls_after: list[int] = field(default_factory=list)  # per flagged run
    turns_after: list[int] = field(default_factory=list)
    detections: list[RealDetection] = field(default_factory=list)

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


def _tally(score: RealScore, runs: Sequence[RealRun], first_call: Mapping[str, int]) -> RealScore:
    for run in runs:
        row = score.runs.setdefault(run.harness, [0, 0, 0, 0])
        flagged = run.id in first_call
        if run.passed:
            row[0] += 1
            row[1] += flagged
        else:
            row[2] += 1
            row[3] += flagged
        if flagged:
            call = first_call[run.id]
            score.calls_after.append(len(run.calls) - call)
            turns = len({c.turn for c in run.calls})
            score.turns_after.append(turns - run.turn_of_call(call))
    return score


def score_ours(title: str, runs: Sequence[RealRun], detections: Sequence[RealDetection]) -> RealScore:
    """otel-progress's figures from its detections."""
    score = RealScore(title, detections=list(detections))
    first: dict[str, int] = {}
    for d in detections:
        score.reasons[d.reason] += 1
        first[d.run] = min(first.get(d.run, d.call), d.call)
    return _tally(score, runs, first)


def score_baseline(detector: Detector, runs: Sequence[RealRun]) -> RealScore:
    """A baseline's figures from its first alarm on each run (its call: the first call of
    the model turn it alarmed on)."""
    score = RealScore(detector.title)
    first: dict[str, int] = {}
    for run in runs:
        alarm = detector.first_alarm(run.as_corpus_run())
        if alarm is None:
            continue
        turns = sorted({c.turn for c in run.calls})
        turn = turns[alarm.turn - 1]
        first[run.id] = next(c.index for c in run.calls if c.turn == turn)
        score.reasons[detector.name] += 1
    return _tally(score, runs, first)


def load_labels(path: Path = LABELS_FILE) -> dict[str, Any]:
    """The hand labels: ``detections`` (run, call, verdict, why) and ``no_detection``."""
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    return {"detections": list(data.get("detections") or []), "no_detection": list(data.get("no_detection") or [])}


def labelled(detections: Sequence[RealDetection], labels: Mapping[str, Any]) -> dict[str, list[RealDetection]]:
    """Detections sorted by their label: ``real_loop``, ``false_alarm``, ``unlabelled``."""
    verdicts = {(e["run"], int(e["call"])): e["verdict"] for e in labels["detections"]}
    out: dict[str, list[RealDetection]] = {"real_loop": [], "false_alarm": [], "unlabelled": []}
    for d in detections:
        out.setdefault(verdicts.get((d.run, d.call), "unlabelled"), []).append(d)
    return out


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f}%)" if d else "0/0"


def table(scores: Sequence[RealScore], harnesses: Sequence[str]) -> str:
    """The markdown table: per detector and harness, flagged passing and failing runs."""
    head = "| Detector | " + " | ".join(f"{h}: passing flagged | failing flagged" for h in harnesses)
    head += " | all: passing flagged | failing flagged | turns / calls after first detection (mean) |"
    lines = [head, "|---|" + "---:|---:|" * (len(harnesses) + 1) + "---:|"]
    for s in scores:
        cells = []
        for h in harnesses:
            p, pf, f, ff = s.runs.get(h, [0, 0, 0, 0])
            cells += [_pct(pf, p), _pct(ff, f)]
        p, pf, f, ff = s.totals()
        cells += [_pct(pf, p), _pct(ff, f), f"{s.mean_turns_after:.1f} / {s.mean_calls_after:.1f}"]
        lines.append(f"| {s.title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(runs: Sequence[RealRun], scores: Sequence[RealScore], labels: Mapping[str, Any],
             files: Sequence[Path], consistency: Sequence[str]) -> str:
    """The real-runs section of RESULTS.md."""
    harnesses = sorted({r.harness for r in runs})
    ours = scores[0]
    sorted_labels = labelled(ours.detections, labels)
    real, false, unl = (len(sorted_labels[k]) for k in ("real_loop", "false_alarm", "unlabelled"))
    total = len(ours.detections)
    p, pf, f, ff = ours.totals()
    misses = [e for e in labels["no_detection"] if e.get("verdict") == "missed_loop"]
    parts = [
        "## Real runs",
        "",
        f"{len(runs)} real runs written by others ({', '.join(harnesses)}; files"
        f" {', '.join(x.name for x in files)} in `../shared/realtraces/`, not part of the project), with the"
        " benchmark's pass/fail on each. otel-progress with the default configuration, no manifest,"
        " through `otel-progress scan` (first row) and `ProgressSpanProcessor` (second row); the"
        " baselines on the same calls, one step per model turn. A failing run is not necessarily a"
        " loop: flagged failing runs are an upper bound on recall, flagged passing runs a lower bound"
        " on false alarms (a passing run can loop for a while and recover).",
        "",
        table(scores, harnesses),
        "",
        (f"**Precision by the hand labels** (`bench/quality/real_labels.yaml`, rule in the README):"
         f" {real} of {total} detections are real loops ({100 * real / total:.0f}%)" if total else
         "**Precision by the hand labels**: no detection")
        + f"; {false} labelled false alarms, {unl} unlabelled. Passing runs flagged: {_pct(pf, p)};"
        f" failing runs flagged: {_pct(ff, f)}. Turns after the first detection (mean over flagged"
        f" runs): {ours.mean_turns_after:.1f}; calls: {ours.mean_calls_after:.1f}. Labelled long failing"
        f" runs without a detection: {len(labels['no_detection'])}, of which {len(misses)} are missed loops.",
        "",
        "Detections per reason (otel-progress, scan): "
        + (", ".join(f"`{k}` {v}" for k, v in sorted(ours.reasons.items())) or "none") + ".",
        "",
        "| Run | Call | Reason | Level | Label |",
        "|---|---:|---|---:|---|",
    ]
    verdicts = {(e["run"], int(e["call"])): e["verdict"] for e in labels["detections"]}
    for d in ours.detections:
        parts.append(f"| `{d.run}` | {d.call} | {d.reason} | {d.level} | {verdicts.get((d.run, d.call), '?')} |")
    parts += ["", *(consistency or ["The scan and the processor agree on every detection."]), ""]
    return "\n".join(parts)


_SIZE = re.compile(r'<svg[^>]*?width="(\d+)" height="(\d+)"')


def chart_svg(scores: Sequence[RealScore], ours_titles: Sequence[str]) -> str:
    """Three panels: passing runs flagged, failing runs flagged, calls after the first detection."""
    most = max((s.mean_calls_after for s in scores), default=1.0) or 1.0
    panels = (
        ("Passing runs flagged|lower is better", lambda s: s.passing_flagged_rate,
         lambda s: f"{100 * s.passing_flagged_rate:.0f}%", 1.0),
        ("Failing runs flagged|not all failing runs loop", lambda s: s.failing_flagged_rate,
         lambda s: f"{100 * s.failing_flagged_rate:.0f}%", 1.0),
        ("Calls after the first detection|mean over flagged runs", lambda s: s.mean_calls_after,
         lambda s: f"{s.mean_calls_after:.1f}", most),
    )
    return panels_svg(scores, ours_titles, "Loop detectors on real agent runs", panels)


def stack_svgs(first: str, second: str) -> str:
    """Two SVG documents one above the other, in one document."""
    (w1, h1), (w2, h2) = ((int(a), int(b)) for a, b in (_SIZE.search(first).groups(),  # type: ignore[union-attr]
                                                        _SIZE.search(second).groups()))  # type: ignore[union-attr]
    width, height = max(w1, w2), h1 + h2
    inner2 = second.replace("<svg ", f'<svg y="{h1}" ', 1)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">\n{first}{inner2}</svg>\n')
