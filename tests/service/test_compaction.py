"""Compaction boundaries in ``serve``'s trace path (BatchDetector): a model span marked
``gen_ai.conversation.compacted`` after an unmarked one is a boundary of its run, also when
the trace arrives in several requests; the same detections as ``scan`` (analyse_trace)."""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.trace.v1 import trace_pb2

from otel_progress import Config, ProgressEngine
from otel_progress.scan.analyse import analyse_trace
from otel_progress.service.detector import BatchDetector
from otel_progress.service.otlp import span_record

from .helpers import agent_span, request, span, tool_span


def _chat(trace: int, span_id: int, turn: float, compacted: bool) -> trace_pb2.Span:
    attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 900,
                             "gen_ai.usage.output_tokens": 20}
    if compacted:
        attrs["gen_ai.conversation.compacted"] = True
    return span(trace, span_id, 1, "chat m", turn * 2.0 - 1.0, turn * 2.0 - 0.1, attrs)


def _trace(reads: list[tuple[str, bool]]) -> list[trace_pb2.Span]:
    """One agent run: per turn a model call (marked when the flag says so) and a read of
    the path (the same content each time)."""
    spans = []
    for t, (path, compacted) in enumerate(reads, 1):
        spans.append(_chat(7, 100 + t, t, compacted))
        spans.append(tool_span(7, 200 + t, 1, t, tool="read_file", args={"path": path},
                               result={"text": f"the text of {path}"}))
    spans.append(agent_span(7, 1, None, len(reads), name="coder"))
    return spans


def _serve(spans: list[trace_pb2.Span], batches: int) -> list[tuple[str, int]]:
    detector = BatchDetector(ProgressEngine(Config()))
    found = []
    size = -(-len(spans) // batches)
    for i in range(0, len(spans), size):
        result = detector.process(request(spans[i:i + size]).SerializeToString())
        found += [(d.reason.value, d.turn) for d in result.new_detections]
    return found


def _scan(spans: list[trace_pb2.Span]) -> list[tuple[str, int]]:
    report = analyse_trace([span_record(s) for s in spans], ProgressEngine(Config()))
    return [(d.reason.value, d.turn) for d in report.detections]


FOUR = ["a.py", "b.py", "c.py", "d.py"]


def test_the_re_read_after_a_compaction_is_quiet_in_every_batching() -> None:
    reads = [(p, False) for p in FOUR] + [(p, i == 0) for i, p in enumerate(FOUR)]
    unmarked = [(p, False) for p, _ in reads]
    for batches in (1, 2, 5):
        assert _serve(_trace(reads), batches) == _scan(_trace(reads)) == []
        assert _serve(_trace(unmarked), batches) == _scan(_trace(unmarked)) == [("state_revisit", 7)]


def test_compactions_with_only_re_reads_between_them_are_a_livelock_in_every_batching() -> None:
    # the instrumentation marks the first model call after each compaction
    reads = [("a.py", False), ("b.py", False)] + [("a.py", True), ("b.py", False)] * 3
    for batches in (1, 3):
        assert _serve(_trace(reads), batches) == _scan(_trace(reads)) == [("compaction_livelock", 6)]
    progress = [("a.py", False)] + [(p, i % 2 == 0) for i, p in enumerate(
        ["a.py", "new1.py", "a.py", "new2.py", "a.py", "new3.py"])]
    assert _serve(_trace(progress), 2) == _scan(_trace(progress)) == []
