"""``otel-progress scan``: detections in exported OTLP/JSON traces and logs.

A document (a line of the Collector file exporter's output, or a whole file) with
``resourceSpans`` is read as traces, one with ``resourceLogs`` as coding agents' log events
(:mod:`otel_progress.conventions.logs`; one file may hold both). Log records are grouped into runs by
the agents' readers and tracked by :class:`~otel_progress.runs.logruns.LogRunTracker`; each
run is reported like a trace, under its run key.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import IO, Any, TextIO

from ..conventions import is_group_key
from ..conventions.logs import event_names
from ..engine import ProgressEngine
from ..engine.config import Config, ConfigError
from ..otlp.files import MAX_DOCUMENT_BYTES, ReadProblem, iter_documents, open_input, spans_from_request
from ..otlp.logs_json import is_logs_document, records_from_request
from ..runs.assembly import AssembledTrace, TraceAssembler
from ..runs.groups import HeldGroups
from ..runs.logruns import SESSION_END_EVENTS, LogRunTracker, RunEnd
from ..runs.model import RunModel
from ..runs.replay import replay_trace
from .analyse import TraceReport, run_rows

__all__ = [
    "EXIT_CLEAN",
    "EXIT_DETECTED",
    "EXIT_DETECTED_UNREADABLE",
    "EXIT_ERROR",
    "EXIT_INTERNAL",
    "MAX_HELD_SPANS",
    "MAX_PROBLEMS_SHOWN",
    "ScanResult",
    "run_scan",
    "scan_paths",
]

EXIT_CLEAN = 0
EXIT_DETECTED = 1
EXIT_ERROR = 2
#: An internal error (a bug): reported in one line, never as a traceback.
EXIT_INTERNAL = 3
#: Detections found, and some input could not be read (reported on stderr): what was
#: read is reported in full; a script that acts on detections tests for 1 or 4.
EXIT_DETECTED_UNREADABLE = 4

# the records a log reader reads, and the session ends (the others are read lean)
_LOG_EVENT_NAMES = event_names() | SESSION_END_EVENTS

#: Spans held at once while traces are assembled; past it traces are analysed early.
MAX_HELD_SPANS = 200_000

_PROGRESS_MIN_BYTES = 8 * 1024 * 1024


class _Progress:
    """A progress bar on stderr for large inputs (only when stderr is a terminal, or
    forced): bytes read of the total, and the spans read so far."""

    #: at most one redraw in this many seconds
    every_s = 0.2

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
        if self.enabled and now - self._last >= self.every_s:
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
    """Wraps a byte stream to count what was read (for the progress bar), and to copy it
    (``copy``: stdin, for a second reading). ``position``: how far the file on disk was
    read, for the progress bar, whose total is the size on disk: of a compressed file,
    the bytes read are the decompressed ones, many times more."""

    def __init__(self, stream: IO[bytes], copy: IO[bytes] | None = None,
                 position: Callable[[], int] | None = None) -> None:
        self.stream = stream
        self.copy = copy
        self.count = 0
        self._position = position

    def readline(self, size: int = -1) -> bytes:
        line = self.stream.readline(size)
        self.count += len(line)
        if self.copy is not None:
            self.copy.write(line)
        return line

    def consumed(self) -> int:
        """The progress made: bytes of the file on disk read (``position``), else bytes read."""
        if self._position is not None:
            try:
                return self._position()
            except (OSError, ValueError):  # (closed, or not a file after all)
                self._position = None
        return self.count

    def close(self) -> None:
        if self.copy is not None:
            self.copy.close()


def _disk_position(stream: IO[bytes]) -> Callable[[], int] | None:
    """How far the file under ``stream`` was read from disk (its descriptor's offset;
    gzip's decompressor reads ahead by at most ~136 KiB of compressed bytes), or None
    when it is no regular file (a pipe)."""
    try:
        fd = stream.fileno()
        os.lseek(fd, 0, os.SEEK_CUR)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return None
    return lambda: os.lseek(fd, 0, os.SEEK_CUR)


#: Problems of one kind shown per input file; the rest are counted (``ScanResult.hidden``).
MAX_PROBLEMS_SHOWN = 20


class ScanResult:
    """Everything a scan found: reports per trace and the problems met reading.

    ``problems`` holds the first :data:`MAX_PROBLEMS_SHOWN` problems of each kind per
    file; ``hidden`` counts the rest, by ``(file, kind)``; ``timelines`` is the per-call
    data of each run for the HTML report when the scan was asked to keep it."""

    def __init__(self) -> None:
        self.reports: list[TraceReport] = []
        self.problems: list[ReadProblem] = []
        self.hidden: dict[tuple[str, str], int] = {}
        self.unreadable = False
        self.spans = 0
        self.log_records = 0
        #: run keys of the reports that are log runs (not traces)
        self.log_runs: set[str] = set()
        self.held_peak = 0  # the most spans held at once while traces were assembled
        self.timelines: dict[tuple[str, str], Any] | None = None
        self._shown: dict[tuple[str, str], int] = {}

    @property
    def detections(self) -> list[Any]:
        return [d for r in self.reports for d in r.detections]

    def problem(self, problem: ReadProblem, kind: str) -> None:
        """Record a problem of a kind (``json``, ``span``, ``id``, ...)."""
        key = (problem.source, kind)
        shown = self._shown.get(key, 0)
        if shown < MAX_PROBLEMS_SHOWN:
            self._shown[key] = shown + 1
            self.problems.append(problem)
        else:
            self.hidden[key] = self.hidden.get(key, 0) + 1

    def hidden_lines(self) -> list[str]:
        """One line per kind of problem with more occurrences than were shown."""
        return [f"{source}: {n:,} more {_KINDS.get(kind, kind)} not shown ({n + self._shown[(source, kind)]:,} in all)"
                for (source, kind), n in self.hidden.items()]


_KINDS = {
    "json": "lines that could not be read",
    "span": "spans that could not be read",
    "id": "spans with malformed or reused ids",
    "late": "spans that arrived after their trace was analysed",
    "log": "log records that could not be read",
}


class _Scan:
    """One scan in progress: reading, assembling traces and analysing each when complete
    (the scan's driver of the run model: :mod:`otel_progress.runs`)."""

    def __init__(self, engine: ProgressEngine, result: ScanResult, bar: _Progress, max_document_bytes: int,
                 max_held_spans: int) -> None:
        self.engine = engine
        self.model = RunModel(engine)
        self.result = result
        self.bar = bar
        self.max_document_bytes = max_document_bytes
        self.max_held_spans = max_held_spans
        self.assembler = TraceAssembler(max_held_spans=max_held_spans)
        self.groups = HeldGroups(self.model, max_calls=max_held_spans)
        # report id -> (sort key, report): a trace analysed again replaces its report
        self.reports: dict[str, tuple[tuple[int, int, str], TraceReport]] = {}
        self.analysed = 0  # spans that went into the analysis
        self.logs = LogRunTracker(self.model)
        self.log_detections: dict[str, list[Any]] = {}
        self.log_index = 0
        self.copies: dict[str, str] = {}  # source -> a file to read it again from (stdin's copy)

    def read(self, path: str) -> None:
        result = self.result
        source = "<stdin>" if path == "-" else path
        try:
            stream, _ = open_input(path)
        except OSError as exc:
            result.problem(ReadProblem(source, 0, f"cannot open: {exc.strerror or exc}"), "open")
            result.unreadable = True
            return
        position = _disk_position(stream) if self.bar.enabled and path != "-" else None
        counting = _Counting(stream, self._copy(source) if path == "-" else None, position)
        documents = 0
        failed = False
        before = 0
        try:
            for item in iter_documents(counting, source,  # type: ignore[arg-type]
                                       max_document_bytes=self.max_document_bytes):
                if isinstance(item, ReadProblem):
                    result.problem(item, "json")
                    continue
                line, doc = item
                spans = 0
                if is_logs_document(doc):
                    documents += self._add_logs(doc, source, line)
                if not is_logs_document(doc) or "resourceSpans" in doc or "resource_spans" in doc:
                    read = self._add_spans(doc, source, line)
                    documents += read >= 0
                    spans = max(read, 0)
                done = counting.consumed()
                self.bar.advance(done - before, spans)
                before = done
        except (OSError, EOFError) as exc:  # e.g. a truncated gzip stream
            result.problem(ReadProblem(source, 0, f"read error: {exc}; the rest of the file is skipped"), "read")
            result.unreadable = failed = True
        finally:
            counting.close()
            if path != "-":
                stream.close()
        if documents == 0 and not failed:
            result.problem(ReadProblem(source, 0, "no OTLP/JSON trace or logs data found"), "empty")
            result.unreadable = True

    def _copy(self, source: str) -> IO[bytes]:
        """A temporary copy of what is read from stdin, to read late traces again from."""
        copy = tempfile.NamedTemporaryFile(prefix="otel-progress-scan-", suffix=".stdin", delete=False)  # noqa: SIM115
        self.copies[source] = copy.name
        return copy

    def _add_logs(self, doc: Any, source: str, line: int) -> bool:
        """Feed one logs document's records to the log runs; False if it was unreadable."""
        result = self.result
        problems: list[ReadProblem] = []
        try:
            records = list(records_from_request(doc, problems, source=source, line=line,
                                                start_index=self.log_index, names=_LOG_EVENT_NAMES))
        except (ValueError, TypeError) as exc:
            result.problem(ReadProblem(source, line, f"{exc}; skipped"), "json")
            return False
        for problem in problems:
            result.problem(problem, "log")
        self.log_index += len(records)
        result.log_records += len(records)
        for record in records:
            detections, ended = self.logs.add(record)
            for d in detections:
                self.log_detections.setdefault(d.trace_id, []).append(d)
            for end in ended:
                self._log_report(end)
        return True

    def _log_report(self, end: RunEnd) -> None:
        key = end.run.run_key
        report = TraceReport(key, detections=self.log_detections.pop(key, []) + list(end.detections))
        if end.summary is not None:
            report.runs.append(end.summary)
            report.tool_calls = end.summary.turns
        self.analysed += 1
        self.result.log_runs.add(key)
        self.reports[f"{key}\x00{len(self.reports)}"] = ((end.run.first_ns, 1, key), report)

    def _add_spans(self, doc: Any, source: str, line: int) -> int:
        """Assemble one trace document's spans; the number read (-1: unreadable)."""
        result = self.result
        problems: list[ReadProblem] = []
        try:
            spans = list(spans_from_request(doc, problems, source=source, line=line, lean=True))
        except (ValueError, TypeError) as exc:
            result.problem(ReadProblem(source, line, f"{exc}; skipped"), "json")
            return -1
        for problem in problems:
            result.problem(problem, "id")
        add = self.assembler.add
        for span in spans:
            if span.trace_id and span.span_id:
                problem = add(span, source, line)
                if problem is not None:
                    result.problem(ReadProblem(source, line, problem[1]), problem[0])
            else:
                result.problem(ReadProblem(source, line, "span without traceId/spanId skipped"), "id")
        result.spans += len(spans)
        if self.assembler.held_spans > result.held_peak:
            result.held_peak = self.assembler.held_spans
        for trace in self.assembler.end_document():
            self._analyse(trace)
        return len(spans)

    def finish(self) -> None:
        for trace in self.assembler.finish():
            self._analyse(trace)
        self._read_late_traces_again()
        for end in self.logs.finish():
            self._log_report(end)
        self._end_groups()
        self._one_report_per_loop()
        self._summary_problems()
        result = self.result
        result.reports = [rep for _, rep in sorted(self.reports.values(), key=lambda t: t[0])]

    def _summary_problems(self) -> None:
        result = self.result
        a = self.assembler
        if a.duplicates:
            result.problem(ReadProblem("scan", 0, f"{a.duplicates:,} duplicate span(s) (the id and content of a"
                                                  " span already read, e.g. an export sent twice) dropped"), "summary")
        if a.incomplete:
            result.problem(ReadProblem("scan", 0, f"{a.incomplete:,} trace(s) analysed before their root span was"
                                                  " read: more spans were held at once than the limit"
                                                  " (--max-held-spans)"), "summary")
        if a.late:
            result.problem(ReadProblem("scan", 0, f"{len(a.late):,} trace(s) had spans arriving after the trace was"
                                                  " analysed; their lines were read again and each was analysed"
                                                  " whole"), "summary")
        if result.log_records and not result.log_runs:
            result.problem(ReadProblem("scan", 0, f"none of the {result.log_records:,} log record(s) read is an"
                                                  " event a coding-agent reader knows (see docs/logs.md)"), "summary")
        if result.spans and not self.analysed:
            result.problem(ReadProblem("scan", 0, f"none of the {result.spans:,} span(s) read could be analysed"),
                           "summary")
            result.unreadable = True
        cap = self.engine.config.max_runs
        if self.logs.runs_evicted:
            result.problem(ReadProblem("scan", 0, f"{self.logs.runs_evicted:,} log run(s) ended early: more runs were"
                                                  f" open at once than max_runs ({cap:,}); each was analysed up to"
                                                  " then and its later records as a new run"), "summary")
        stats = self.engine.stats
        if stats.runs_evicted:
            result.problem(ReadProblem("scan", 0, f"{stats.runs_evicted:,} run(s) dropped unfinished: more runs"
                                                  f" were open at once than max_runs ({cap:,})"), "summary")

    def _read_late_traces_again(self) -> None:
        """Traces that received spans after they were analysed: read the lines that held
        their spans again, assemble them whole and analyse each again (its report
        replaces the first one). Bounded by the held-spans limit like the first reading."""
        late = self.assembler.late
        if not late:
            return
        again = TraceAssembler(grace_seconds=float("inf"), max_held_spans=self.max_held_spans)
        for source, lines in self.assembler.late_lines().items():
            path = self.copies.get(source, source)
            try:
                stream, _ = open_input(path)
            except OSError:
                continue
            try:
                for item in iter_documents(stream, source, max_document_bytes=self.max_document_bytes):
                    if isinstance(item, ReadProblem) or item[0] not in lines:
                        continue
                    try:
                        spans = list(spans_from_request(item[1], lean=True))
                    except (ValueError, TypeError):
                        continue
                    for span in spans:
                        if span.trace_id in late and span.span_id:
                            again.add(span, source, item[0])
                    for trace in again.end_document():
                        self._analyse(trace, again=True)
            except (OSError, EOFError):
                pass
            finally:
                stream.close()
        for trace in again.finish():
            self._analyse(trace, again=True)

    def _end_groups(self) -> None:
        """End the grouped runs of root tool calls (runs that span traces, keyed by the
        conversation or session they name): one report per run, under its group key."""
        for key, dets, summaries in self.groups.finish():
            report = TraceReport(key, detections=dets, runs=[s for s in summaries if s.turns or s.detections])
            if report.runs or report.detections:
                self.reports[key] = ((1 << 62, 2, key), report)

    def _one_report_per_loop(self) -> None:
        """Of one agent session's logs and traces, only one signal's detections: the
        richer one's, if it detected anything (:meth:`RunModel.final`)."""
        reports = [rep for _, rep in self.reports.values()]
        dropped = self.model.final(d for rep in reports for d in rep.detections)
        if dropped:
            for rep in reports:
                rep.detections = [d for d in rep.detections if id(d) not in dropped]

    def _analyse(self, trace: AssembledTrace, again: bool = False) -> None:
        spans = list(trace.spans.values())
        report = replay_trace(spans, self.model, group=self.groups.add)
        if not again:
            self.analysed += len(spans) - len(report.skipped)
            for span_id, why in report.skipped:
                self.result.problem(ReadProblem(trace.source, trace.lines.get(span_id, 0),
                                                f"span {span_id} of trace {trace.trace_id} could not be read ({why});"
                                                " skipped"), "span")
        if self.result.timelines is not None:
            from .report import trace_timelines

            self.result.timelines.update(trace_timelines(trace.trace_id, spans))
        self.reports[trace.trace_id] = ((trace.start_ns, 0, trace.trace_id), report)


def scan_paths(
    paths: Sequence[str],
    config: Config | None = None,
    *,
    progress: bool | None = None,
    stderr: TextIO | None = None,
    timelines: bool = False,
    max_document_bytes: int = MAX_DOCUMENT_BYTES,
    max_held_spans: int = MAX_HELD_SPANS,
) -> ScanResult:
    """Read OTLP/JSON files and analyse every trace in them, each as soon as it is
    complete (see :mod:`otel_progress.runs.assembly`). ``timelines``: also keep each run's
    per-call data for the HTML report (``result.timelines``)."""
    err = stderr or sys.stderr
    result = ScanResult()
    if timelines:
        result.timelines = {}
    total = 0
    for path in paths:
        if path != "-":
            with contextlib.suppress(OSError):
                total += os.path.getsize(path)
    show = progress if progress is not None else (total >= _PROGRESS_MIN_BYTES and err.isatty())
    bar = _Progress(total, err, bool(show))
    scan = _Scan(ProgressEngine(config or Config()), result, bar, max_document_bytes, max_held_spans)
    try:
        for path in paths:
            scan.read(path)
        scan.finish()
    finally:
        for copy in scan.copies.values():
            with contextlib.suppress(OSError):
                os.unlink(copy)
    bar.close()
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
    runs = run_rows(result.reports)
    traces = sum(not is_group_key(r.trace_id) and r.trace_id not in result.log_runs for r in result.reports)
    logs = f", {result.log_records} log records" if result.log_records else ""
    out.write(f"\nRuns: {len(runs)} ({sum(1 for r in runs if r.detections)} with detections)"
              f" in {traces} traces, {result.spans} spans{logs}\n")
    if runs:
        # RUN: the agent invocation's span id (runs of one trace differ there); '-' for a
        # coding agent's run, whose run key is in TRACE
        out.write(f"{'TRACE':<32}  {'RUN':<16}  {'AGENT':<16}  {'TURNS':>5}  {'TOKENS':>8}  {'DETECT':>6}  "
                  f"{'FIRST':>5}  {'WASTED TURNS':>12}  {'WASTED TOKENS':>13}\n")
        for r in sorted(runs, key=lambda r: (-r.wasted_tokens, -r.wasted_turns, r.trace_id, r.run_id)):
            first = "-" if r.first_detection_turn is None else str(r.first_detection_turn)
            run = "-" if r.run_id == r.trace_id or not r.run_id else r.run_id[:16]
            out.write(f"{r.trace_id:<32}  {run:<16}  {(r.agent or '-')[:16]:<16}  {r.turns:>5}  {r.tokens:>8}  "
                      f"{len(r.detections):>6}  {first:>5}  {r.wasted_turns:>12}  {r.wasted_tokens:>13}\n")


def writable(path: str) -> str | None:
    """Why ``path`` cannot be written (a message), or None if it can. Checked before
    the work, so that a long scan or demo does not end in a failed write."""
    if os.path.isdir(path):
        return f"{path}: is a directory"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"{path}: directory {parent} does not exist"
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            return f"{path}: not writable"
    elif not os.access(parent, os.W_OK | os.X_OK):
        return f"{path}: directory {parent} is not writable"
    return None


def run_scan(
    paths: Sequence[str],
    *,
    config_path: str | None = None,
    fmt: str = "json",
    html: str | None = None,
    progress: bool | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    max_document_bytes: int = MAX_DOCUMENT_BYTES,
    max_held_spans: int = MAX_HELD_SPANS,
) -> int:
    """The ``scan`` command; returns the exit status (``EXIT_*``)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        config = Config.from_env()
        if config_path:
            config = Config.from_file(config_path, config)
    except ConfigError as exc:
        err.write(f"otel-progress scan: {exc}\n")
        return EXIT_ERROR
    if html:
        why = writable(html)
        if why is not None:
            err.write(f"otel-progress scan: cannot write the HTML report: {why}\n")
            return EXIT_ERROR
    result = scan_paths(paths, config, progress=progress, stderr=err, timelines=bool(html),
                        max_document_bytes=max_document_bytes, max_held_spans=max_held_spans)
    for problem in result.problems:
        err.write(f"otel-progress scan: {problem}\n")
    for line in result.hidden_lines():
        err.write(f"otel-progress scan: {line}\n")
    if fmt == "table":
        _format_table(result, out)
    else:
        for d in result.detections:
            out.write(json.dumps(d.to_dict(), sort_keys=True) + "\n")
    out.flush()
    if html:
        from .report import write_html

        try:
            write_html(result, html)
        except OSError as exc:
            err.write(f"otel-progress scan: cannot write the HTML report: {html}: {exc.strerror or exc}\n")
            return EXIT_ERROR
    if result.unreadable:
        return EXIT_DETECTED_UNREADABLE if result.detections else EXIT_ERROR
    return EXIT_DETECTED if result.detections else EXIT_CLEAN
