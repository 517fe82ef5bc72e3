"""The JavaScript framework matrix harness (issue 18): the command line, and one import for
its modules (:mod:`.rows`: the set-ups and the README table; :mod:`.envs`: the cached
``node_modules``; :mod:`.pipeline`: the Collector and serve; :mod:`.runs`: agent runs and
how they are judged).

Each directory ``setups/<framework>/`` holds ``agent.mjs`` (a real agent of the framework
on its scripted model), ``package.json`` with exact pins, its ``package-lock.json``, and
``setups.toml``, the list of set-ups (see ``tests/frameworks_js/README.md``).

Run one set-up by hand (installs its packages and builds the Collector if needed, starts
the pipeline, prints what serve forwarded and what scan finds)::

    python -m tests.frameworks_js.harness <framework> <setup> [scenario ...] [--dump DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tests._matrix.cli import harness_main

from .envs import CACHE_DIR, InstallError, app_dir, env_path, install, prebuild
from .pipeline import Exported, Pipeline, PipelineError
from .rows import (
    ROOT,
    SCENARIOS,
    SETUPS_DIR,
    WORKS_WITH_HEADER,
    Setup,
    SetupError,
    discover,
    works_with_row,
    works_with_table,
)
from .runs import BASE_ENV, DETECTION_EVENTS, Run, agent_env, is_tool_span, run_agent, scan_detections

__all__ = [
    "BASE_ENV", "CACHE_DIR", "DETECTION_EVENTS", "ROOT", "SCENARIOS", "SETUPS_DIR", "WORKS_WITH_HEADER", "Exported",
    "InstallError", "Pipeline", "PipelineError", "Run", "Setup", "SetupError", "agent_env", "app_dir", "discover",
    "env_path", "install", "is_tool_span", "main", "prebuild", "run_agent", "scan_detections", "works_with_row",
    "works_with_table",
]


def _collector() -> str:
    proc = subprocess.run(["bash", str(ROOT / "collector-config" / "build-collector.sh")], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"build-collector.sh failed:\n{proc.stderr[-2000:]}")
    return proc.stdout.strip().splitlines()[-1]


def _run(setup: Setup, scenarios: Sequence[str], args: argparse.Namespace) -> None:
    env = install(setup.directory)
    with tempfile.TemporaryDirectory(prefix="js-matrix-") as tmp:
        pipeline = Pipeline(_collector(), Path(tmp))
        pipeline.start()
        try:
            for scenario in scenarios:
                run = run_agent(setup, scenario, env, pipeline, args.dump)
                print(run.summary())
                if args.attrs:
                    for s in run.tool_spans() + run.model_spans():
                        print(" ", s.name, dict(s.attributes), list(s.events))
                found, _ = scan_detections(run, Path(tmp), anywhere=True)
                print(f"  serve: {sorted(run.served_detections(anywhere=True))}\n  scan:  {sorted(found)}")
                if run.returncode != 0:
                    print(run.stderr[-3000:])
        finally:
            pipeline.stop()


def main(argv: Sequence[str] | None = None) -> int:
    return harness_main(
        argv, prog="python -m tests.frameworks_js.harness", doc=__doc__,
        prebuild_help="'prebuild' installs every framework's packages",
        dump_help="write each run's output and sent spans into this directory",
        discover=discover, table=works_with_table, run=_run, prebuild=lambda _: prebuild())


if __name__ == "__main__":
    sys.exit(main())
