"""The framework × instrumentation matrix harness (issue 9): the command line, and one
import for the names of its modules (:mod:`.rows`: the set-ups and the README table;
:mod:`.venvs`: the cached virtualenvs; :mod:`.runs`: agent runs and how they are judged).

Each directory ``setups/<framework>/`` holds ``agent.py`` (a real agent on a scripted
model), one or more pip requirements files with exact pins, and ``setups.toml``, the list
of set-ups for that framework (see ``tests/frameworks/README.md``). For each set-up the
harness builds, once, a virtualenv with those requirements and otel-progress itself, then
runs ``opentelemetry-instrument python agent.py <scenario>`` in it with the console span
exporter and returns the spans it printed.

Run one set-up by hand (builds its virtualenv if needed, prints a summary of the spans)::

    python -m tests.frameworks.harness <framework> <setup> <scenario> [--dump DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from tests._matrix.builds import in_ci
from tests._matrix.cli import harness_main

from .rows import (
    ROOT,
    RUN_TIMEOUT_S,
    SCENARIOS,
    SETUPS_DIR,
    WORKS_WITH_HEADER,
    Setup,
    SetupError,
    discover,
    pins,
    works_with_row,
    works_with_table,
)
from .runs import BASE_ENV, DETECTION_EVENTS, Run, agent_env, detection_events, is_tool_span, run_agent
from .venvs import CACHE_DIR, Builder, BuildError, build_venv, prebuild, source_path, venv_path

__all__ = [
    "BASE_ENV", "CACHE_DIR", "DETECTION_EVENTS", "ROOT", "RUN_TIMEOUT_S", "SCENARIOS", "SETUPS_DIR",
    "WORKS_WITH_HEADER", "BuildError", "Builder", "Run", "Setup", "SetupError", "agent_env", "build_venv",
    "detection_events", "discover", "in_ci", "is_tool_span", "main", "pins", "prebuild", "run_agent",
    "source_path", "venv_path", "works_with_row", "works_with_table",
]


def _run(setup: Setup, scenarios: Sequence[str], args: argparse.Namespace) -> None:
    venv = build_venv(setup.requirements_path)
    for scenario in scenarios:
        run = run_agent(setup, scenario, venv, args.dump)
        print(run.summary())
        if args.attrs:
            for s in run.tool_spans() + run.model_spans():
                print(json.dumps({"name": s["name"], "attributes": s.get("attributes"),
                                  "events": s.get("events")}, indent=1)[:6000])
        if run.returncode != 0:
            print(run.stderr[-3000:])


def main(argv: Sequence[str] | None = None) -> int:
    return harness_main(
        argv, prog="python -m tests.frameworks.harness", doc=__doc__,
        prebuild_help="'prebuild [JOBS]' builds every set-up's virtualenv",
        dump_help="write each run's stdout/stderr into this directory",
        discover=discover, table=works_with_table, run=_run,
        prebuild=lambda jobs: prebuild(int(jobs or os.environ.get("OTEL_PROGRESS_MATRIX_BUILD_JOBS", "2"))))


if __name__ == "__main__":
    sys.exit(main())
