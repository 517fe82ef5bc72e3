"""The engine benchmark's peers (issue 26): what the engine's cost per real call is set
against, how it is printed, and the engine's stage counts.

* :func:`pydantic_pass`: the port of Pydantic AI Harness's ``LoopDetection``
  (:mod:`bench.quality.baselines.pydantic_ai`) over a trace's calls, one fresh port per
  run (its ``for_run``), each call as one model response followed by its tool result (the
  work per call is the same whatever the turns: one fingerprint for tiers 1 and 2b, one
  more and a ``repr`` of the result for tier 2a).
* :func:`fingerprint_pass`: the plain fingerprint guard over the same calls.
* :func:`target_table`: engine, Pydantic port, fingerprint guard and floor per call, with
  the two targets of issue 26 beside their figures: engine / Pydantic below 1x, engine /
  floor at most 3x.
* :func:`before_after_table`: the same figures for two checkouts of the engine.
* :func:`count_stages`: the number of calls reaching each stage of the engine's content
  path, counted by wrapping the functions that do each stage (no counters in the engine).
* :func:`quality_lines`: the labelled loops caught and no-loop runs flagged by the engine,
  the Pydantic port and the fingerprint guard on the labelled real runs, per source.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.quality.baselines.pydantic_ai import Fingerprint, LoopDetectionPort
from otel_progress import NOT_CAPTURED, ToolCall

__all__ = [
    "ENGINE_PYDANTIC_GOAL",
    "FLOOR_GOAL",
    "PeerInput",
    "before_after_table",
    "count_stages",
    "fingerprint_pass",
    "peer_inputs",
    "pydantic_pass",
    "quality_lines",
    "stage_lines",
    "target_table",
]

ENGINE_PYDANTIC_GOAL = 1.0  # engine / Pydantic port per real call: below (issue 26)
FLOOR_GOAL = 3.0  # engine / floor per real call: at most (issues 16 and 26)

#: One call as the peers take it: (tool name, arguments, result, failed).
PeerInput = tuple[str, Any, Any, bool]


def _content(value: Any) -> Any:
    return None if value is NOT_CAPTURED else value


def peer_inputs(calls: Sequence[ToolCall]) -> list[list[PeerInput]]:
    """The calls of one trace grouped per run (``run_id``; runs in the order of their
    first call), each call as :data:`PeerInput`."""
    runs: dict[str, list[PeerInput]] = {}
    for c in calls:
        runs.setdefault(c.run_id, []).append((c.name, _content(c.arguments), _content(c.result), c.error))
    return list(runs.values())


def pydantic_pass(runs: Sequence[Sequence[PeerInput]]) -> int:
    """The Pydantic port over each run (a fresh port per run); the detections."""
    hits = 0
    for calls in runs:
        port = LoopDetectionPort()
        for call in calls:
            if port.step((call,)) is not None:
                hits += 1
    return hits


def fingerprint_pass(runs: Sequence[Sequence[PeerInput]]) -> int:
    """The fingerprint guard over each run (a fresh guard per run); the detections."""
    hits = 0
    for calls in runs:
        guard = Fingerprint()
        for name, args, _, _ in calls:
            if guard.observe(name, args) is not None:
                hits += 1
    return hits


# -- tables -----------------------------------------------------------------------------

#: Per round, the times of one source: (engine, floor, Pydantic port, fingerprint guard).
Times = Sequence[Sequence[float]]


def _figures(times: Times, n: int) -> dict[str, float]:
    med = statistics.median
    return {"engine": med(t[0] for t in times) / n * 1e6, "floor": med(t[1] for t in times) / n * 1e6,
            "pydantic": med(t[2] for t in times) / n * 1e6, "fingerprint": med(t[3] for t in times) / n * 1e6,
            "vs_pydantic": med(t[0] / t[2] for t in times), "vs_floor": med(t[0] / t[1] for t in times)}


def _mark(value: float, goal: float, strict: bool) -> str:
    met = value < goal if strict else value <= goal
    return "met" if met else "not met"


def target_table(rows: Sequence[tuple[str, int, Times]]) -> list[str]:
    """One line per ``(label, calls, times per round)``: µs per call of the engine, the
    Pydantic port, the fingerprint guard and the floor (medians over the rounds), and the
    medians of the per-round ratios engine / Pydantic and engine / floor, each with its
    goal and whether it is met."""
    head = (f"  {'source':<36} {'calls':>6} {'engine':>8} {'Pydantic':>9} {'fingerp.':>9} {'floor':>7}"
            f"   {'engine/Pydantic [goal < 1x]':<30} {'engine/floor [goal <= 3x]':<28}")
    lines = [head, "  " + "-" * (len(head) - 2)]
    for label, n, times in rows:
        f = _figures(times, n)
        lines.append(
            f"  {label:<36} {n:>6} {f['engine']:>6.1f}µs {f['pydantic']:>7.1f}µs {f['fingerprint']:>7.1f}µs"
            f" {f['floor']:>5.1f}µs   {f['vs_pydantic']:>5.2f}x ({_mark(f['vs_pydantic'], ENGINE_PYDANTIC_GOAL, True)})"
            f"{'':<14} {f['vs_floor']:>5.1f}x ({_mark(f['vs_floor'], FLOOR_GOAL, False)})")
    return lines


def before_after_table(before: Sequence[tuple[str, int, Times]], after: Sequence[tuple[str, int, Times]],
                       before_name: str) -> list[str]:
    """Per source: engine µs per call, engine / Pydantic and engine / floor, before (the
    other checkout) and after (this one), each measured beside its own Pydantic port and
    floor in the same rounds."""
    lines = [f"  {'source':<36} {'engine µs/call':>20} {'engine/Pydantic [< 1x]':>24} {'engine/floor [<= 3x]':>22}",
             f"  {'':<36} {'before':>9} {'after':>10} {'before':>11} {'after':>12} {'before':>10} {'after':>11}"]
    after_rows = {label: (n, t) for label, n, t in after}
    for label, n, times in before:
        if label not in after_rows:
            continue
        n_after, times_after = after_rows[label]
        b, a = _figures(times, n), _figures(times_after, n_after)
        lines.append(f"  {label:<36} {b['engine']:>9.1f} {a['engine']:>10.1f} {b['vs_pydantic']:>10.2f}x"
                     f" {a['vs_pydantic']:>11.2f}x {b['vs_floor']:>9.1f}x {a['vs_floor']:>10.1f}x")
    lines.append(f"  (before: the engine of {before_name}; after: this checkout's; rounds alternated)")
    return lines


# -- the engine's stages ----------------------------------------------------------------

#: The stages of the engine's content path, each counted at the function that does its
#: work (stage name, module, owner attribute or None for a module function, function).
STAGES: tuple[tuple[str, str, str | None, str], ...] = (
    ("request parsed (not a recent text)", "otel_progress.engine.texts", "TextFacts", "_request"),
    ("result: long JSON digested raw", "otel_progress.evidence.canonical", "Digester", "raw_result"),
    ("result: plain text read (not recent)", "otel_progress.engine.texts", "TextFacts", "text_result_of"),
    ("result: JSON or long text parsed", "otel_progress.engine.facts", "FactBuilder", "_result"),
    ("failure read", "otel_progress.engine.facts", "FactBuilder", "_error"),
    ("opaque tokens masked", "otel_progress.evidence.opaque", None, "mask_opaque"),
    ("volatile tokens masked", "otel_progress.evidence.volatile", None, "mask_volatile"),
    ("answers compared masked", "otel_progress.evidence.volatile", None, "answer_text"),
    ("wordings compared (same request)", "otel_progress.evidence.content", None, "same_prose"),
    ("location views compared", "otel_progress.evidence.views", "Views", "observe"),
    ("answer sketches made", "otel_progress.evidence.views", "Sketch", "__init__"),
)


def count_stages(run: Callable[[], Any]) -> dict[str, int]:
    """The number of calls of each stage's function (:data:`STAGES`) while ``run()`` runs:
    each function is wrapped by a counter for the time of the call and restored after it
    (in the bench's own untimed pass: the engine carries no counters). A function this
    checkout does not have counts as absent (left out)."""
    import importlib

    counts: dict[str, int] = {}
    restore: list[tuple[Any, str, Any]] = []

    def counted(stage: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[stage] += 1
            return function(*args, **kwargs)
        return wrapper

    try:
        for stage, module_name, owner_name, name in STAGES:
            module = importlib.import_module(module_name)
            owner = getattr(module, owner_name) if owner_name else module
            function = getattr(owner, name, None)
            if function is None:
                continue
            counts[stage] = 0
            restore.append((owner, name, function))
            setattr(owner, name, counted(stage, function))
        run()
    finally:
        for owner, name, function in reversed(restore):
            setattr(owner, name, function)
    return counts


def stage_lines(counts: Mapping[str, int], calls: int) -> list[str]:
    """The ``--stages`` figures: calls reaching each stage, with their share of all calls."""
    return [f"  {stage:<36} {n:>7} calls ({n / calls:6.1%} of {calls})" for stage, n in counts.items()]


# -- quality beside the cost ------------------------------------------------------------

def quality_lines(files: Sequence[Path]) -> list[str]:
    """Labelled loops caught (a detection at a call inside the loop's window) and labelled
    no-loop runs flagged (any detection), per source and overall, for otel-progress
    (``scan``, every detection), the Pydantic port and the fingerprint guard (their first
    alarm, where they would have nudged or stopped: as in the scoreboard), and the
    Pydantic port's every alarm (its default ``nudge`` lets the run go on)."""
    from bench.quality import real
    from bench.quality.baselines.pydantic_ai import FingerprintGuard, PydanticLoopDetection
    from bench.quality.labels import load_all_labels
    from bench.quality.realruns import load_real_runs
    from bench.quality.sources import loops_caught, no_loop_flagged

    runs = load_real_runs(files)
    labels = load_all_labels()
    detectors: list[tuple[str, list[real.RealDetection]]] = [
        ("otel-progress (scan, every detection)", real.scan_detections(files, runs))]
    for det in (PydanticLoopDetection(), FingerprintGuard()):
        score = real.score_baseline(det, runs)
        detectors.append((f"{det.title} (first alarm)",
                          [real.RealDetection(r, c, det.name, 1) for r, cs in score.alarms.items() for c in cs]))
    detectors.append(("Pydantic AI Harness LoopDetection (every alarm)", _every_pydantic_alarm(runs)))
    groups: dict[str, list[Any]] = {}
    for r in runs:
        groups.setdefault(r.harness, []).append(r)
    groups["all sources"] = list(runs)
    lines = [f"  {'detector':<64} {'source':<28} {'loops caught in window':>22} {'no-loop runs flagged':>22}"]
    for title, found in detectors:
        for source, subset in groups.items():
            caught, flagged = loops_caught(subset, found, labels), no_loop_flagged(subset, found, labels)
            if caught.n or flagged.n:
                lines.append(f"  {title:<64} {source:<28} {caught.k:>8}/{caught.n:<4} {_pct(caught.k, caught.n):>9}"
                             f" {flagged.k:>8}/{flagged.n:<4} {_pct(flagged.k, flagged.n):>9}")
    return lines


def _pct(k: int, n: int) -> str:
    return f"({100 * k / n:.0f}%)" if n else "-"


def _every_pydantic_alarm(runs: Sequence[Any]) -> list[Any]:
    """Every detection of the Pydantic port on each run, at the first call of the model
    turn it fired on (as the scoreboard places a baseline's alarm)."""
    from bench.quality.baselines.pydantic_ai import call_input
    from bench.quality.real import RealDetection

    out = []
    for run in runs:
        corpus = run.as_corpus_run()
        first_call = {}
        for c in run.calls:
            first_call.setdefault(c.turn, c.index)
        turns = sorted(first_call)
        ports: dict[int, LoopDetectionPort] = {}
        for step in corpus.steps:
            port = ports.setdefault(step.invocation, LoopDetectionPort())
            if port.step([call_input(c) for c in step.calls]) is not None:
                out.append(RealDetection(run.id, first_call[turns[step.turn - 1]], "pydantic-ai", 1))
    return out
