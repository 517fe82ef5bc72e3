"""The command line both harnesses share: ``works-with`` prints the README table,
``prebuild`` builds every cache directory, ``<framework>`` lists its set-ups and
``<framework> <setup> [scenario ...]`` runs them (the part each matrix does its own way)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from .rows import SCENARIOS, MatrixSetup

S = TypeVar("S", bound=MatrixSetup)


def harness_main(argv: Sequence[str] | None, *, prog: str, doc: str | None, prebuild_help: str, dump_help: str,
                 discover: Callable[[], list[S]], table: Callable[[list[S]], str],
                 prebuild: Callable[[str | None], int],
                 run: Callable[[S, Sequence[str], argparse.Namespace], None]) -> int:
    """Parse ``argv`` and do what it says. ``prebuild`` gets the optional word after
    ``prebuild``; ``run(setup, scenarios, args)`` runs the scenarios of one set-up and prints
    what they did (``args.dump``: a directory for each run's output; ``args.attrs``: print the
    tool spans' attributes too)."""
    parser = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("framework", help="a directory under setups/; 'works-with' prints the README table; "
                                          + prebuild_help)
    parser.add_argument("setup", nargs="?", help="set-up name (default: list them)")
    parser.add_argument("scenario", nargs="*", help=f"any of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--dump", type=Path, help=dump_help)
    parser.add_argument("--attrs", action="store_true", help="also print every attribute of the tool spans")
    args = parser.parse_args(argv)
    if args.framework == "works-with":
        print(table(discover()))
        return 0
    if args.framework == "prebuild":
        return prebuild(args.setup)
    setups = [s for s in discover() if s.framework == args.framework]
    if not args.setup:
        for s in setups:
            print(s.name, "-", s.instrumentation, "" if s.works else f"(cannot: {s.reason})")
        return 0
    (setup,) = [s for s in setups if s.name == args.setup] or [None]
    if setup is None:
        parser.error(f"no set-up {args.setup!r} in {args.framework}")
    known = SCENARIOS + setup.model_scenarios
    bad = [s for s in args.scenario if s not in known]
    if bad:
        parser.error(f"unknown scenario {bad[0]!r}; choose from {', '.join(known)}")
    run(setup, args.scenario or known, args)
    return 0
