"""Building tool-call sequences for engine tests."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from otel_progress import Config, Detection, ProgressEngine, ToolCall, parse_manifest
from otel_progress.demo import DEMO_MANIFEST

S = 1_000_000_000

DEPLOY_MANIFEST = DEMO_MANIFEST  # seed 001's build-status poll and a declared write tool


def manifest_config(entries: list[dict[str, Any]] | None = None, **changes: Any) -> Config:
    return Config(manifest=parse_manifest(entries if entries is not None else DEPLOY_MANIFEST), **changes)


def call(name: str, args: Any = None, result: Any = None, **fields: Any) -> dict[str, Any]:
    """A call description: name, arguments, result and any ToolCall field (t = start s)."""
    return {"name": name, "arguments": args, "result": result, **fields}


def as_json(value: Any) -> str:
    return json.dumps(value)


def make_calls(seq: Iterable[dict[str, Any]], gap: float = 10.0, duration: float = 1.0,
               trace_id: str = "t1", run_id: str = "") -> list[ToolCall]:
    out: list[ToolCall] = []
    for i, spec in enumerate(seq):
        spec = dict(spec)
        start = spec.pop("t", i * gap)
        dur = spec.pop("duration", duration)
        spec.setdefault("span_id", f"{i + 1:016x}")
        spec.setdefault("trace_id", trace_id)
        spec.setdefault("run_id", run_id)
        out.append(ToolCall(start_ns=int(start * S), end_ns=int((start + dur) * S), **spec))
    return out


def run(seq: Sequence[dict[str, Any]], config: Config | None = None, **kw: Any) -> list[Detection]:
    """Feed calls one at a time, flushing when no later call overlaps (as the in-process
    processor does when no other tool span is open), end the trace; returns the
    announced detections."""
    engine = ProgressEngine(config or Config())
    out: list[Detection] = []
    calls = make_calls(seq, **kw)
    for i, c in enumerate(calls):
        quiet = i + 1 == len(calls) or calls[i + 1].start_ns >= max(x.end_ns for x in calls[: i + 1])
        out.extend(engine.observe(c, flush=quiet))
    for summary in engine.end_trace(kw.get("trace_id", "t1")):
        out.extend(summary.detections_list)
    return out


def brief(detections: Sequence[Detection]) -> list[tuple[int, str, int]]:
    """(turn, reason, level) of each detection."""
    return [(d.turn, d.reason.value, int(d.level)) for d in detections]
