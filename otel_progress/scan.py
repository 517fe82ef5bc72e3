"""``otel-progress scan``: detections in exported OTLP/JSON traces."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import IO, Any, TextIO

from .analyse import TraceReport, analyse_trace
from .config import Config, ConfigError
from .engine import ProgressEngine
from .otlp_json import ReadProblem, iter_documents, open_input, spans_from_request
from .spans import SpanRecord

__all__ = ["EXIT_CLEAN", "EXIT_DETECTED", "EXIT_ERROR", "ScanResult", "run_scan", "scan_paths"]

EXIT_CLEAN = 0
EXIT_DETECTED = 1
EXIT_ERROR = 2

_PROGRESS_MIN_BYTES = 8 * 1024 * 1024


class _Progress:
    """A progress bar on stderr for large inputs (only when stderr is a terminal, or
    forced): bytes read of the total, and the spans read so far."""

    def __init__(self, total: int, stream: TextIO, enabled: bool) -> None:
        self.total = total
        self.stream = stream
        self.enabled = enabled
        self.done = 0
        self.spans = 0
        self._last = 0.0

    def advance(self, nbytes: int, spans: int) -> None:
        self.done += nbytes
        self.spans += spans
        now = time.monotonic()
        if self.enabled and now - self._last >= 0.2:
            self._last = now
            self._draw()

    def _draw(self, final: bool = False) -> None:
        if self.total:
            frac = min(1.0, self.done / self.total)
            bar = "#" * int(frac * 30)
            text = f"\rscanning [{bar:<30}] {frac * 100:5.1f}%  {self.spans} spans"
        else:
            text = f"\rscanning {self.done / 1e6:.1f} MB  {self.spans} spans"
        self.stream.write(text + ("\n" if final else ""))
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(final=True)


class _Counting:
    """Wraps a byte stream to count what was read (for the progress bar)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.count = 0

    def __iter__(self) -> Iterator[bytes]:
        for line in self.stream:
            self.count += len(line)
            yield line


class ScanResult:
    """Everything a scan found: reports per trace and the problems met reading."""

    def __init__(self) -> None:
        self.reports: list[TraceReport] = []
        self.problems: list[ReadProblem] = []
        self.unreadable = False
        self.spans = 0

    @property
    def detections(self) -> list[Any]:
        return [d for r in self.reports for d in r.detections]


def _read(paths: Sequence[str], progress: _Progress, result: ScanResult) -> dict[str, list[SpanRecord]]:
    traces: dict[str, list[SpanRecord]] = {}
    for path in paths:
        source = "<stdin>" if path == "-" else path
        try:
            stream, _ = open_input(path)
        except OSError as exc:
            result.problems.append(ReadProblem(source, 0, f"cannot open: {exc.strerror or exc}"))
            result.unreadable = True
            continue
        counting = _Counting(stream)
        documents = 0
        try:
            before = 0
            for item in iter_documents(counting, source):  # type: ignore[arg-type]
                if isinstance(item, ReadProblem):
                    result.problems.append(item)
                    continue
                line, doc = item
                try:
                    spans = list(spans_from_request(doc))
                except (ValueError, TypeError) as exc:
                    result.problems.append(ReadProblem(source, line, f"{exc}; skipped"))
                    continue
                documents += 1
                for span in spans:
                    if span.trace_id and span.span_id:
                        traces.setdefault(span.trace_id, []).append(span)
                    else:
                        result.problems.append(ReadProblem(source, line, "span without traceId/spanId skipped"))
                result.spans += len(spans)
                progress.advance(counting.count - before, len(spans))
                before = counting.count
        except (OSError, EOFError) as exc:  # e.g. a truncated gzip stream
            result.problems.append(ReadProblem(source, 0, f"read error: {exc}; the rest of the file is skipped"))
            result.unreadable = True
        finally:
            if path != "-":
                stream.close()
        if documents == 0 and not result.unreadable:
            result.problems.append(ReadProblem(source, 0, "no OTLP/JSON trace data found"))
            result.unreadable = True
    return traces


def scan_paths(
    paths: Sequence[str],
    config: Config | None = None,
    *,
    progress: bool | None = None,
    stderr: TextIO | None = None,
) -> ScanResult:
    """Read OTLP/JSON files and analyse every trace in them."""
    err = stderr or sys.stderr
    result = ScanResult()
    total = 0
    for path in paths:
        if path != "-":
            with contextlib.suppress(OSError):
                total += os.path.getsize(path)
    show = progress if progress is not None else (total >= _PROGRESS_MIN_BYTES and err.isatty())
    bar = _Progress(total, err, bool(show))
    traces = _read(paths, bar, result)
    bar.close()
    engine = ProgressEngine(config or Config())
    ordered = sorted(traces.items(), key=lambda kv: min(s.start_ns for s in kv[1]))
    for _, spans in ordered:
        result.reports.append(analyse_trace(spans, engine))
    return result


def _format_table(result: ScanResult, out: TextIO) -> None:
    dets = result.detections
    if dets:
        out.write(f"{'TRACE':<32}  {'SPAN':<16}  {'AGENT':<16}  {'TURN':>4}  {'LEVEL':<9}  "
                  f"{'EVENT':<11}  {'REASON':<19}  FIGURES\n")
        for d in dets:
            figures = " ".join(f"{k}={v}" for k, v in d.figures.items())
            agent = (d.agent or "-")[:16]
            out.write(f"{d.trace_id:<32}  {d.span_id:<16}  {agent:<16}  {d.turn:>4}  "
                      f"{int(d.level)} {d.level.action:<7}  {d.event:<11}  {d.reason.value:<19}  {figures}\n")
    else:
        out.write("no detections\n")
    runs = [r for rep in result.reports for r in rep.runs]
    out.write(f"\nRuns: {len(runs)} ({sum(1 for r in runs if r.detections)} with detections)"
              f" in {len(result.reports)} traces, {result.spans} spans\n")
    if runs:
        out.write(f"{'TRACE':<32}  {'AGENT':<16}  {'TURNS':>5}  {'TOKENS':>8}  {'DETECT':>6}  "
                  f"{'FIRST':>5}  {'WASTED TURNS':>12}  {'WASTED TOKENS':>13}\n")
        for r in sorted(runs, key=lambda r: (-r.wasted_tokens, -r.wasted_turns, r.trace_id)):
            first = "-" if r.first_detection_turn is None else str(r.first_detection_turn)
            out.write(f"{r.trace_id:<32}  {(r.agent or '-')[:16]:<16}  {r.turns:>5}  {r.tokens:>8}  "
                      f"{r.detections:>6}  {first:>5}  {r.wasted_turns:>12}  {r.wasted_tokens:>13}\n")


def run_scan(
    paths: Sequence[str],
    *,
    config_path: str | None = None,
    fmt: str = "json",
    html: str | None = None,
    progress: bool | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """The ``scan`` command; returns the exit status."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        config = Config.from_env()
        if config_path:
            config = Config.from_file(config_path, config)
    except ConfigError as exc:
        err.write(f"otel-progress scan: {exc}\n")
        return EXIT_ERROR
    result = scan_paths(paths, config, progress=progress, stderr=err)
    for problem in result.problems:
        err.write(f"otel-progress scan: {problem}\n")
    if fmt == "table":
        _format_table(result, out)
    else:
        for d in result.detections:
            out.write(json.dumps(d.to_dict(), sort_keys=True) + "\n")
    if html:
        from .report import write_html

        write_html(result, html, sources=[p for p in paths if p != "-"])
    out.flush()
    if result.unreadable:
        return EXIT_ERROR
    return EXIT_DETECTED if result.detections else EXIT_CLEAN
