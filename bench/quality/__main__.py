"""``python -m bench.quality``: the detection-quality scoreboard.

Runs otel-progress (``otel-progress scan`` on generated OTLP/JSON traces in each span
convention, and ``ProgressSpanProcessor`` in process) and every baseline over the
labelled corpus, prints the table and writes ``bench/quality/RESULTS.md`` and
``bench/quality/scoreboard.svg``. ``--html FILE`` also writes the HTML run report of the
GenAI traces through ``otel-progress scan --html``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from . import real, sources
from .baselines import baselines
from .baselines.base import Alarm, Detector
from .corpus import load_corpus
from .labels import load_all_labels
from .otlp import CONVENTIONS
from .ours import ProcessorDetector, ScanDetector, processor_available, run_config_file
from .realruns import REAL_DIR, load_real_runs, real_files
from .scoreboard import chart_svg, markdown, score, table

HERE = Path(__file__).parent
#: The harnesses of ``../shared/realtraces/added/`` (charted on their own as well).
_ADDED = frozenset({"react-hotpotqa", "openhands-v1-sdk", "magentic-one"})


def _consistency(runs: Sequence, results: dict[str, dict[str, Alarm | None]], titles: Sequence[str]) -> list[str]:
    lines: list[str] = []
    reference = titles[0]
    for title in titles[1:]:
        for run in runs:
            a, b = results[reference].get(run.id), results[title].get(run.id)
            ta, tb = (a.turn if a else None), (b.turn if b else None)
            if ta != tb:
                lines.append(f"- `{run.id}`: {reference.replace('**', '')} → {ta or '-'}"
                             f" ({a.detail if a else 'no alarm'}); {title.replace('**', '')} → {tb or '-'}"
                             f" ({b.detail if b else 'no alarm'})")
    return lines


def write_report(runs: Sequence, workdir: Path, path: str) -> None:
    """The HTML report of the GenAI traces: ``scan_paths`` per run config (as
    ``otel-progress scan --config``), one report for the corpus."""
    from otel_progress import Config
    from otel_progress.scan import ScanResult, scan_paths
    from otel_progress.scan.report import write_html

    groups: dict[str | None, list[str]] = {}
    for run in runs:
        groups.setdefault(run_config_file(run, workdir), []).append(str(workdir / "genai" / f"{run.id}.json"))
    merged = ScanResult()
    for config, files in groups.items():
        result = scan_paths(files, Config.from_file(config) if config else Config())
        merged.reports += result.reports
        merged.problems += result.problems
        merged.spans += result.spans
    write_html(merged, path, sources=[f for files in groups.values() for f in files])


def _real_runs(args: argparse.Namespace, base: Sequence[Detector]) -> tuple[str, str, str]:
    """The real-runs section (markdown), its chart and a summary for the terminal; a
    message instead when the real runs are absent."""
    files = real_files()
    if args.no_real or not files:
        why = "skipped (--no-real)" if args.no_real else (
            f"skipped: no real runs at {REAL_DIR} (the project does not ship them)")
        return f"## Real runs\n\n{why}.\n", "", f"real runs: {why}"
    runs = load_real_runs(files)
    labels = load_all_labels()
    scan = real.score_ours("**otel-progress** (scan)", runs, real.scan_detections(files, runs))
    per_source = sources.table(sources.figures(runs, scan.detections, labels))
    scores = [scan]
    consistency: list[str] = []
    if not args.no_processor and processor_available():
        proc = real.score_ours("**otel-progress** (processor)", runs, real.processor_detections(files, runs))
        scores.append(proc)
        a = {(d.run, d.call, d.reason) for d in scan.detections}
        b = {(d.run, d.call, d.reason) for d in proc.detections}
        consistency = [f"- `{r}` call {c}: {why} only ({x})" for (r, c, x), why in
                       [*((k, "scan") for k in sorted(a - b)), *((k, "processor") for k in sorted(b - a))]]
    scores += [real.score_baseline(d, runs) for d in base]
    ours_titles = [s.title for s in scores[:2]]
    sorted_labels = real.labelled(scan.detections, labels)
    n = len(scan.detections)
    p, pf, _, _ = scan.totals()
    caught, total = real.loops_caught(scan, labels["loops"])
    summary = [f"real runs ({len(runs)}): {n} detections, {len(sorted_labels['real_loop'])} labelled real loops,"
               f" {len(sorted_labels['false_alarm'])} false alarms, {len(sorted_labels['unlabelled'])} unlabelled;"
               f" labelled loops caught in window {caught}/{total}; passing runs flagged {pf}/{p}",
               real.table(scores, labels["loops"])]
    for harness in sorted({r.harness for r in runs}):
        subset = [r for r in runs if r.harness == harness]
        ids = {r.id for r in subset}
        mine = real.rescore(scan, subset)
        c, t = real.loops_caught(mine, [e for e in labels["loops"] if e["run"] in ids])
        sl = real.labelled(mine.detections, labels)
        sp, spf, sf, sff = mine.totals()
        summary.append(f"  {harness}: loops caught in window {c}/{t}; detections {len(mine.detections)}"
                       f" (real {len(sl['real_loop'])}, false {len(sl['false_alarm'])}, unlabelled"
                       f" {len(sl['unlabelled'])}); passing flagged {spf}/{sp}; failing flagged {sff}/{sf};"
                       f" reasons {dict(sorted(mine.reasons.items()))}")
    new_sources = [r for r in runs if r.harness in _ADDED]
    charts = [real.chart_svg(scores, ours_titles, labels["loops"])]
    if new_sources and len(new_sources) < len(runs):
        ids = {r.id for r in new_sources}
        charts.append(real.chart_svg([real.rescore(s, new_sources) for s in scores], ours_titles,
                                     [e for e in labels["loops"] if e["run"] in ids],
                                     "The same on the three added sources (ReAct, OpenHands V1, Magentic-One)"))
    figures = ["### Per-source figures", "",
               "otel-progress (scan) on the labelled runs of each source; each rate is k/n, its percentage and"
               " its Wilson 95 % interval. Definitions in the README (\"Per-source figures\"); `python -m"
               " bench.quality.gate` holds them to the floors of `floors.yaml`.", "", per_source, ""]
    summary += ["", "per-source figures (k/n, %, Wilson 95 % interval):", per_source]
    return (real.markdown(runs, scores, labels, files, consistency, figures), real.stack_svgs(*charts),
            "\n".join(summary))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(HERE), help="where RESULTS.md and scoreboard.svg go")
    parser.add_argument("--traces", metavar="DIR", help="keep the generated OTLP/JSON traces here")
    parser.add_argument("--html", metavar="FILE", help="also write the HTML report of the GenAI traces")
    parser.add_argument("--no-processor", action="store_true", help="skip the in-process path")
    parser.add_argument("--only", nargs="*", help="restrict to these run ids")
    parser.add_argument("--no-real", action="store_true", help="skip the real-runs section")
    args = parser.parse_args(argv)

    runs = load_corpus(only=args.only)
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
        workdir = Path(args.traces) if args.traces else Path(tmp)
        ours: list[Detector] = [ScanDetector(c, workdir) for c in CONVENTIONS]
        processor_note = ""
        if args.no_processor:
            processor_note = "The in-process path was skipped (--no-processor)."
        elif processor_available():
            ours += [ProcessorDetector(c) for c in CONVENTIONS]
        else:
            processor_note = "otel_progress.ProgressSpanProcessor is not available: in-process path not run."
        results: dict[str, dict[str, Alarm | None]] = {}
        for det in ours:
            results[det.title] = det.evaluate(runs)
        base = baselines()
        for det in base:
            results[det.title] = det.evaluate(runs)
        if args.html:
            write_report(runs, workdir, args.html)

    primary = ours[0].title
    main_titles = [ours[0].title, *(d.title for d in ours if isinstance(d, ProcessorDetector)
                                     and d.convention == "genai")]
    scores_ours = [score(t, runs, results[t]) for t in main_titles]
    scores_base = [score(d.title, runs, results[d.title]) for d in base]
    primary_score = scores_ours[0]
    shown = scores_ours + scores_base
    consistency = _consistency(runs, results, [d.title for d in ours])
    if processor_note:
        consistency = [processor_note, *consistency]
    order = [*(d.title.replace("**otel-progress** ", "ours ") for d in ours), *(d.name for d in base)]
    matrix = {t.replace("**otel-progress** ", "ours "): results[t] for t in results}
    matrix.update({d.name: results[d.title] for d in base})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(runs, shown, primary_score, scores_base, matrix, consistency, order)
    svg = chart_svg(shown, main_titles)
    real_text, real_svg, real_summary = _real_runs(args, base)
    if real_svg:
        svg = real.stack_svgs(svg, real_svg)
    (out / "RESULTS.md").write_text(text + "\n" + real_text, encoding="utf-8")
    (out / "scoreboard.svg").write_text(svg, encoding="utf-8")
    print(table(shown))
    print()
    print(real_summary)
    print()
    print(f"wrote {out / 'RESULTS.md'} and {out / 'scoreboard.svg'}")
    if processor_note:
        print(processor_note)
    from .scoreboard import comparison

    gaps = comparison(primary_score, scores_base)
    if gaps:
        print(f"\n{primary.replace('**', '')} is not strictly ahead on:")
        print("\n".join(gaps))
    for line in consistency:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
