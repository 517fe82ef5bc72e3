"""Compaction boundaries in process: an agent instrumented with the GenAI conventions marks
the model call after each compaction ``gen_ai.conversation.compacted = true``; the
processor (real SDK) reads the boundary from the model span and finds what ``scan`` finds
in the exported trace. Each rule both ways: the re-read after a compaction is quiet (the
same spans without the marker are revisits of the same paths), a loop going on across a
compaction is caught at the same step, compactions with only re-reads between them are a
``compaction_livelock``, compactions with new results between them are not."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from otel_progress import Config, ProgressEngine
from otel_progress.conventions.spans import SpanRecord
from otel_progress.scan.analyse import analyse_trace

from .conftest import Rig, make_rig, progress_events

#: A model call of the script; ``COMPACTED``: the first one after a compaction.
CHAT, COMPACTED = "chat", "compacted"


def _play(rig: Rig, script: Sequence[str]) -> None:
    """One agent run: ``chat`` / ``compacted`` model calls and ``read:<path>[=<text>]`` tools."""
    tracer = rig.provider.get_tracer("tests")
    with tracer.start_as_current_span("invoke_agent coder", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "coder"}):
        for item in script:
            if item in (CHAT, COMPACTED):
                attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                              "gen_ai.usage.input_tokens": 900, "gen_ai.usage.output_tokens": 20}
                if item == COMPACTED:
                    attributes["gen_ai.conversation.compacted"] = True
                with tracer.start_as_current_span("chat m", attributes=attributes):
                    pass
                continue
            path, _, text = item.removeprefix("read:").partition("=")
            with tracer.start_as_current_span("execute_tool read_file", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
                    "gen_ai.tool.call.arguments": json.dumps({"path": path}),
                    "gen_ai.tool.call.result": text or f"the text of {path}"}):
                pass


def _offline(rig: Rig) -> list[tuple[str, int, int, str]]:
    records = [SpanRecord(
        trace_id=format(s.context.trace_id, "032x"), span_id=format(s.context.span_id, "016x"),
        parent_id=format(s.parent.span_id, "016x") if s.parent else "", name=s.name,
        start_ns=s.start_time or 0, end_ns=s.end_time or 0,
        attributes={k: v for k, v in s.attributes.items() if not k.startswith("progress.")},
    ) for s in rig.spans()]
    return _brief(analyse_trace(records, ProgressEngine(Config())).detections)


def _brief(detections: Sequence) -> list[tuple[str, int, int, str]]:
    return [(d.reason.value, d.turn, int(d.level), d.span_id) for d in detections]


def _run(script: Sequence[str]) -> tuple[list[tuple[str, int, int, str]], Rig]:
    rig = make_rig(Config())
    _play(rig, script)
    live = _brief(rig.detections)
    assert live == _offline(rig), "scan finds what the processor found"
    return live, rig


def _unmarked(script: Sequence[str]) -> list[str]:
    return [CHAT if item == COMPACTED else item for item in script]


FOUR = ["read:a.py", "read:b.py", "read:c.py", "read:d.py"]


def _turns(script: Sequence[str]) -> list[tuple[str, int]]:
    return [(reason, turn) for reason, turn, _level, _span in _run(script)[0]]


def test_the_re_read_after_a_compaction_is_quiet() -> None:
    script = [CHAT, *FOUR, COMPACTED, *FOUR, CHAT, "read:e.py"]
    assert _turns(script) == []
    assert _turns(_unmarked(script)) == [("state_revisit", 7)]  # the same paths again


def test_only_the_first_marked_model_call_is_a_boundary() -> None:
    """An instrumentation that marks every model call after the compaction: one boundary,
    so the second round of re-reads counts."""
    script = [CHAT, *FOUR, COMPACTED, *FOUR, COMPACTED, *FOUR]
    assert _turns(script) == [("state_revisit", 11)]


@pytest.mark.parametrize("at", [2, 3])
def test_a_loop_going_on_across_a_compaction_is_caught_at_the_same_steps(at: int) -> None:
    loop = [item for _ in range(6) for item in (CHAT, "read:notes.txt")]
    script = [*loop[:2 * at], COMPACTED, *loop[2 * at:]]
    assert _turns(script) == _turns(loop) == [("repeat_cycle", 2), ("repeat_cycle", 4), ("repeat_cycle", 6)]


def test_compactions_with_only_re_reads_between_them_are_a_compaction_livelock() -> None:
    script = [CHAT, "read:a.py", "read:b.py"] + [COMPACTED, "read:a.py", CHAT, "read:b.py", CHAT] * 3
    found, rig = _run(script)
    assert [(reason, turn, level) for reason, turn, level, _ in found] == [("compaction_livelock", 6, 1)]
    chat = rig.by_id()[found[0][3]]
    assert chat.name == "chat m" and chat.attributes["gen_ai.conversation.compacted"] is True
    agent = next(s for s in rig.spans() if s.name == "invoke_agent coder")
    events = [e for e in progress_events(agent) if e[0] == "livelock"]
    assert events and events[0][1]["progress.reason"] == "compaction_livelock"
    assert events[0][1]["progress.compactions"] == 3 and events[0][1]["progress.tokens_burned"] > 0


def test_compactions_with_new_results_between_them_are_quiet() -> None:
    script = [CHAT, "read:a.py"]
    for n in range(4):
        script += [COMPACTED, "read:a.py", CHAT, f"read:new{n}.py", CHAT]
    assert _turns(script) == []
