"""Real agent runs (``../shared/realtraces/*.jsonl.gz``, ``added/*.jsonl.gz`` and
``swebench/*.jsonl.gz``) for the scoreboard's real-runs section.

The files are OTLP/JSON as the Collector's file exporter writes them: one trace per run,
with resource attributes ``realtraces.run_id``, ``realtraces.harness`` and
``realtraces.passed``, an ``invoke_agent`` span, a ``chat`` span per model turn and an
``execute_tool`` span per tool call. :func:`load_real_runs` reads them into
:class:`RealRun` objects: the run's id, harness, verdict, trace id and its tool calls in
order (1-based call index, span id, model turn), plus the corpus form
(:class:`~bench.quality.corpus.Run`) the baselines take, with one step per model turn.

Nothing of the runs' content is ever written into the project: the scoreboard reports
counts, and the hand labels (``real_labels.yaml``) name only run ids and call indexes.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .corpus import Call, ErrorInfo, Run, Step

__all__ = ["REAL_DIR", "RealCall", "RealRun", "load_real_runs", "real_files"]

#: Where the real runs live, relative to the repository (absent on most machines).
REAL_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "realtraces"


@dataclass(frozen=True)
class RealCall:
    """One tool call of a real run."""

    index: int  # 1-based, in start order over the whole run
    span_id: str
    turn: int  # 1-based model turn (the chat span before it)
    name: str
    args: Any
    result: str | None
    error_type: str | None


@dataclass(frozen=True)
class RealRun:
    """One real run: ids, the benchmark's verdict and its tool calls in order."""

    id: str
    harness: str
    passed: bool | None  # None: the benchmark did not grade the run
    trace_id: str
    calls: tuple[RealCall, ...]
    file: str

    def call_of(self, span_id: str) -> int | None:
        """The 1-based call index of a tool span, or None."""
        for call in self.calls:
            if call.span_id == span_id:
                return call.index
        return None

    def as_corpus_run(self) -> Run:
        """The run in the corpus form, one step per model turn (what baselines take);
        ``label`` is ``healthy`` for a passing run, ``stuck`` for a failing or ungraded one
        (only a grouping here: a failing run is not necessarily a loop)."""
        steps: list[Step] = []
        by_turn: dict[int, list[Call]] = {}
        for c in self.calls:
            error = ErrorInfo(c.error_type or "error", c.result or "") if c.error_type else None
            by_turn.setdefault(c.turn, []).append(
                Call(c.name, c.args if isinstance(c.args, dict) else None, None if error else c.result, error))
        for n, turn in enumerate(sorted(by_turn), 1):
            steps.append(Step(n, tuple(by_turn[turn]), "agent", 0, float(n), 1.0, 0, 0))
        return Run(self.id, "healthy" if self.passed else "stuck", self.harness, self.file, "", (), None,
                   True, None, "agent", tuple(steps), self.file)

    def turn_of_call(self, index: int) -> int:
        """The corpus step (model turn, 1-based in the run) of a call index."""
        turns = sorted({c.turn for c in self.calls})
        return turns.index(self.calls[index - 1].turn) + 1


def real_files(directory: Path | None = None, *, swebench: bool = True) -> list[Path]:
    """The real-run files present: the traces in the directory, in its ``added/``
    subdirectory and (unless ``swebench`` is false) in its ``swebench/`` subdirectory (not
    the ``*.steps.jsonl.gz`` reading copies); empty when absent."""
    directory = REAL_DIR if directory is None else directory
    if not directory.is_dir():
        return []
    found = [*sorted(directory.glob("*.jsonl.gz")), *sorted((directory / "added").glob("*.jsonl.gz"))]
    if swebench:
        found += sorted((directory / "swebench").glob("*.jsonl.gz"))
    return [p for p in found if not p.name.endswith(".steps.jsonl.gz")]


def _value(v: dict[str, Any]) -> Any:
    for key in ("stringValue", "boolValue", "intValue", "doubleValue"):
        if key in v:
            return int(v[key]) if key == "intValue" else v[key]
    return None


def _attrs(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {a["key"]: _value(a.get("value") or {}) for a in items or ()}


def _runs_of(doc: dict[str, Any], file: str) -> Iterator[RealRun]:
    for rs in doc.get("resourceSpans", []):
        res = _attrs((rs.get("resource") or {}).get("attributes", []))
        spans = [s for ss in rs.get("scopeSpans", []) for s in ss.get("spans", [])]
        spans.sort(key=lambda s: (int(s["startTimeUnixNano"]), s["spanId"]))
        calls: list[RealCall] = []
        turn = 0
        for s in spans:
            attrs = _attrs(s.get("attributes", []))
            op = attrs.get("gen_ai.operation.name")
            if op == "chat":
                turn += 1
            elif op == "execute_tool":
                raw_args = attrs.get("gen_ai.tool.call.arguments")
                try:
                    args = json.loads(raw_args) if isinstance(raw_args, str) else raw_args
                except ValueError:
                    args = raw_args
                failed = (s.get("status") or {}).get("code") == 2
                calls.append(RealCall(len(calls) + 1, s["spanId"], max(turn, 1),
                                      str(attrs.get("gen_ai.tool.name", "")), args,
                                      attrs.get("gen_ai.tool.call.result"),
                                      str(attrs.get("error.type") or "error") if failed else None))
        if spans:
            passed = res.get("realtraces.passed")
            yield RealRun(str(res.get("realtraces.run_id", spans[0]["traceId"])),
                          str(res.get("realtraces.harness", "?")), None if passed is None else bool(passed),
                          spans[0]["traceId"], tuple(calls), file)


def load_real_runs(files: Sequence[Path] | None = None) -> list[RealRun]:
    """Every run of the real-run files (default: :func:`real_files`)."""
    runs: list[RealRun] = []
    for path in real_files() if files is None else files:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    runs.extend(_runs_of(json.loads(line), path.name))
    return runs
