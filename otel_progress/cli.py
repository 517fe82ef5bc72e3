"""The ``otel-progress`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otel-progress",
        description="Notice when an AI agent stops making progress, from its OpenTelemetry traces.",
    )
    parser.add_argument("--version", action="version", version=f"otel-progress {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    scan = sub.add_parser(
        "scan",
        help="detect loops in exported OTLP/JSON traces",
        description=(
            "Read OTLP/JSON traces (the Collector file exporter's output, one request per line;"
            " a single JSON document; or gzip of either; PATH '-' is stdin) and report every"
            " detection. Exit status: 0 no detection, 1 detections found, 2 bad usage or"
            " unreadable input."
        ),
    )
    scan.add_argument("paths", nargs="+", metavar="PATH", help="OTLP/JSON file(s), '-' for stdin")
    scan.add_argument("--config", metavar="FILE", help="config file (JSON/YAML settings or a manifest list)")
    scan.add_argument("--format", choices=("json", "table"), default="json",
                      help="json: one object per detection per line (default); table: readable")
    scan.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    bar = scan.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None,
                     help="always show the progress bar on stderr")
    bar.add_argument("--no-progress", dest="progress", action="store_false",
                     help="never show the progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``otel-progress`` console script."""
    try:
        return _main(argv)
    except BrokenPipeError:  # the reader went away (`| head`): not an error
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "scan":
        from .scan import run_scan

        return run_scan(args.paths, config_path=args.config, fmt=args.format, html=args.html,
                        progress=args.progress)
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
