"""The ``otel-progress`` command line."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from typing import Any

from . import __version__

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otel-progress",
        description="Notice when an AI agent stops making progress, from its OpenTelemetry traces and logs.",
    )
    parser.add_argument("--version", action="version", version=f"otel-progress {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    _add_scan(sub)
    _add_demo(sub)
    _add_serve(sub)
    _add_doctor(sub)
    return parser


def _add_scan(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``scan`` command's arguments."""
    scan = sub.add_parser(
        "scan",
        help="detect loops in exported OTLP/JSON traces and logs",
        description=(
            "Read OTLP/JSON traces and logs (the Collector file exporter's output, one request per"
            " line; a single JSON document; or gzip of either; PATH '-' is stdin; a file may hold"
            " both) and report every detection. Traces: the tool-call spans of any common"
            " instrumentation. Logs: the coding agents' log events (Claude Code, Codex CLI, Gemini"
            " CLI, Qwen Code; docs/logs.md), grouped into runs by session. Exit status: 0 no detection,"
            " 1 detections found, 2 bad usage or unreadable input, 3 internal error, 4 detections found"
            " and some input unreadable; a reader that closes the pipe early (| head) does not change it."
        ),
    )
    scan.add_argument("paths", nargs="+", metavar="PATH", help="OTLP/JSON file(s) of traces and/or logs, '-' for stdin")
    scan.add_argument("--config", metavar="FILE", help="config file (JSON/YAML settings or a manifest list)")
    scan.add_argument("--format", choices=("json", "table"), default="json",
                      help="json: one object per detection per line (default); table: readable")
    scan.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    scan.add_argument("--max-document-mb", type=_positive, default=64, metavar="MB",
                      help="largest document read, in MiB: one line, or a pretty-printed file (default: %(default)s)")
    scan.add_argument("--max-held-spans", type=_positive, default=200_000, metavar="N",
                      help="spans held at once while traces are assembled; past it the oldest traces are"
                           " analysed early (default: %(default)s)")
    bar = scan.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None,
                     help="always show the progress bar on stderr")
    bar.add_argument("--no-progress", dest="progress", action="store_false",
                     help="never show the progress bar")


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``demo`` command's arguments."""
    demo = sub.add_parser(
        "demo",
        help="run scripted looping and healthy agents through the SDK with the processor",
        description=(
            "Run the seed documents' scripted agents (deploy poll, docs search, edit/revert"
            " fix, reconciliation planner, planner/extractor lap, a healthy reader) through"
            " the OpenTelemetry SDK with ProgressSpanProcessor, write their spans as"
            " OTLP/JSON (and to OTLP if OTEL_EXPORTER_OTLP_ENDPOINT is set) and print what"
            " was detected where, with the nudge a harness would have sent. No server needed."
        ),
    )
    demo.add_argument("--output", "-o", metavar="FILE", default=None,
                      help="OTLP/JSON file to write, with the settings used beside it (NAME.config.json, for"
                           " the scan command printed at the end); '' for none (default:"
                           " otel-progress-demo.jsonl in ${OTEL_PROGRESS_CACHE:-~/.cache/otel-progress}/demo/,"
                           " not the current directory)")


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``serve`` command's arguments (:mod:`otel_progress.service.options`)."""
    serve = sub.add_parser(
        "serve",
        help="run the OTLP/gRPC detection service for traces and logs (for a Collector pipeline)",
        description=(
            "Receive traces and logs over OTLP/gRPC on one listener (TraceService/Export; and"
            " LogsService/Export for the coding agents' log events, docs/logs.md), detect agents that"
            " stopped making progress, and either annotate the spans and log records and forward them"
            " (inline mode) or send findings as annotation spans, detection log records and metrics"
            " (tap mode). Every option can also be set with the environment variable shown. See"
            " docs/service.md."
        ),
    )
    from .service.options import add_arguments as _serve_arguments

    _serve_arguments(serve)


def _add_doctor(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``doctor`` command's arguments (:mod:`otel_progress.doctor`)."""
    doctor = sub.add_parser(
        "doctor",
        help="tell why nothing can be detected: instrumentors, content settings, a watched run",
        description=(
            "Examine this environment (or the interpreter of COMMAND): which OpenTelemetry"
            " instrumentors opentelemetry-instrument would load, skip or fail on, what the content-capture"
            " settings in effect mean, and whether the progress processor will be installed. With"
            " '-- COMMAND', run it under opentelemetry-instrument and report its tool spans, how many"
            " carried content, and the detections. Exit status: 0 nothing wrong, 1 problems found,"
            " 2 bad usage or the command could not be run. See docs/doctor.md."
        ),
    )
    from .doctor import add_arguments as _doctor_arguments

    _doctor_arguments(doctor)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


#: Exit status of an internal error (a bug), reported in one line.
EXIT_INTERNAL = 3


class _ReaderMayLeave:
    """``sys.stdout`` / ``sys.stderr`` while a command runs: when the reader of the pipe
    goes away (``scan ... | head -1``), the rest of the output is discarded and the command
    runs to its end, so its exit status is still its verdict (and an HTML report is still
    written). Everything else is the wrapped stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return int(self._stream.write(text))
            except BrokenPipeError:
                self._discard()
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._discard()

    def _discard(self) -> None:
        """From now on write nothing; point the file descriptor at /dev/null, so that what
        the stream still buffers is flushed there at exit instead of failing again."""
        import os

        self.reader_gone = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``otel-progress`` console script.

    Never shows a traceback: an I/O error the command did not handle (output to a full
    disk) is reported in one line with status 2; any other unexpected exception is
    reported in one line with status 3 (set ``OTEL_PROGRESS_TRACEBACK=1`` to see where
    it came from). A reader that closes the pipe early (``| head``) does not change the
    exit status: the rest of the output is discarded (:class:`_ReaderMayLeave`).
    """
    out, err = sys.stdout, sys.stderr
    sys.stdout = _ReaderMayLeave(out) if out is not None else out  # type: ignore[assignment]
    sys.stderr = _ReaderMayLeave(err) if err is not None else err  # type: ignore[assignment]
    try:
        return _run_main(argv)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        sys.stdout, sys.stderr = out, err


def _run_main(argv: Sequence[str] | None) -> int:
    import os

    try:
        return _main(argv)
    except KeyboardInterrupt:
        return 130
    except SystemExit:
        raise
    except OSError as exc:  # e.g. stdout on a full disk: the environment, not a bug
        with contextlib.suppress(Exception):
            where = f"{exc.filename}: " if exc.filename else ""
            sys.stderr.write(f"otel-progress: {where}{exc.strerror or exc}\n")
        return 2
    except Exception as exc:
        if os.environ.get("OTEL_PROGRESS_TRACEBACK"):
            import traceback

            traceback.print_exc()
        text = str(exc).splitlines()[0][:200] if str(exc) else ""
        with contextlib.suppress(Exception):
            sys.stderr.write(f"otel-progress: internal error: {type(exc).__name__}{': ' + text if text else ''}"
                             " (a bug; please report it; OTEL_PROGRESS_TRACEBACK=1 shows where)\n")
        return EXIT_INTERNAL


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "scan":
        from .scan import run_scan

        return run_scan(args.paths, config_path=args.config, fmt=args.format, html=args.html,
                        progress=args.progress, max_document_bytes=args.max_document_mb * 1024 * 1024,
                        max_held_spans=args.max_held_spans)
    if args.command == "serve":
        from .service.options import ServiceConfigError, from_args
        from .service.run import pin_hash_seed, run_serve

        try:
            service_config = from_args(args)
        except ServiceConfigError as exc:
            print(f"otel-progress serve: {exc}", file=sys.stderr)
            return 2
        pin_hash_seed(service_config)  # (run state needs one hash seed: may start the process again)
        return run_serve(service_config)
    if args.command == "doctor":
        from .doctor import run as run_doctor

        return run_doctor(args)
    if args.command == "demo":
        from .demo import default_output, run_demo

        return run_demo(default_output() if args.output is None else (args.output or None))
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
