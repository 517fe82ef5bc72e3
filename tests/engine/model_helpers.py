"""Scripts of model outputs and tool calls for the model-side signals' tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from otel_progress import Config, ProgressEngine, ToolCall
from otel_progress.model import Detection, ModelOutput, ToolRequest

from .helpers import S

__all__ = ["Script", "refuse", "request", "say", "script", "tool"]

Item = tuple[str, dict[str, Any]]


def say(text: str | None = None, *requests: ToolRequest, **fields: Any) -> Item:
    """A model output: its text, its requests and any other ModelOutput field
    (``t``: start in seconds, ``duration``)."""
    return ("output", {"text": text, "requests": tuple(requests), **fields})


def request(name: str, arguments: Any = None, call_id: str | None = None) -> ToolRequest:
    return ToolRequest(name, {} if arguments is None else arguments, call_id)


def tool(name: str, arguments: Any = None, result: Any = None, **fields: Any) -> Item:
    """An executed tool call (``t``: start in seconds, ``duration``)."""
    return ("call", {"name": name, "arguments": {} if arguments is None else arguments, "result": result,
                     **fields})


def refuse(name: str, arguments: Any = None, **fields: Any) -> Item:
    """A tool call the harness or the user refused (``executed`` False)."""
    return tool(name, arguments, None, executed=False, error=True, **fields)


class Script:
    """Feeds items to one engine, 10 s apart (each 1 s long unless ``t`` / ``duration``
    say otherwise); tool calls flushed at once unless ``flush`` is False."""

    def __init__(self, config: Config | None = None, *, flush: bool = True) -> None:
        self.engine = ProgressEngine(config or Config())
        self.flush = flush
        self.n = 0
        self.detections: list[Detection] = []

    def feed(self, items: Sequence[Item]) -> list[Detection]:
        out: list[Detection] = []
        for kind, spec in items:
            spec = dict(spec)
            start = spec.pop("t", self.n * 10.0)
            duration = spec.pop("duration", 1.0)
            times = {"start_ns": int(start * S), "end_ns": int((start + duration) * S)}
            self.n += 1
            if kind == "output":
                spec.setdefault("span_id", f"m{self.n}")
                out += self.engine.observe_model(ModelOutput(trace_id="t1", run_id="r", **times, **spec))
            else:
                spec.setdefault("span_id", f"c{self.n}")
                out += self.engine.observe(ToolCall(trace_id="t1", run_id="r", **times, **spec),
                                           flush=self.flush)
        self.detections += out
        return out

    def end(self) -> list[Detection]:
        out = self.engine.flush("t1")
        for summary in self.engine.end_trace("t1"):
            out += summary.detections_list
        self.detections += out
        return out


def script(items: Sequence[Item], config: Config | None = None, *, flush: bool = True) -> list[Detection]:
    """Every detection of a script, the trace ended."""
    s = Script(config, flush=flush)
    s.feed(items)
    s.end()
    return s.detections
