"""Runs whose span starts tie in whole milliseconds (the OpenTelemetry JavaScript SDK's
clock) are replayed in causal order, the order of their tool-call ids
(:mod:`otel_progress.runs.causal`): ``scan`` (analyse_trace) and ``serve`` (BatchDetector,
in one request or several) find the detections the same run gets with a precise clock,
whatever the span ids, which used to break such ties at random."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_progress import Config, ProgressEngine
from otel_progress.conventions.spans import classify
from otel_progress.runs import causal, replay
from otel_progress.scan.analyse import analyse_trace
from otel_progress.service.detector import BatchDetector
from otel_progress.service.otlp import key_values, span_record

from .helpers import T0, request

MS = 1_000_000


def _span(trace: bytes, span_id: bytes, parent: bytes, name: str, start: int, end: int,
          attrs: dict[str, Any]) -> trace_pb2.Span:
    s = trace_pb2.Span(trace_id=trace, span_id=span_id, parent_span_id=parent, name=name,
                       start_time_unix_nano=start, end_time_unix_nano=end)
    s.attributes.extend(key_values(attrs))
    return s


def _ai_sdk(step: int, call: str, seen: list[str], args: dict[str, Any], result: str) -> tuple[dict, dict]:
    """The attributes of an AI SDK doGenerate span and of the ai.toolCall span it requested."""
    prompt = [{"role": "user", "content": [{"type": "text", "text": "help"}]}]
    for done in seen:
        prompt.append({"role": "assistant", "content": [{"type": "tool-call", "toolCallId": done}]})
        prompt.append({"role": "tool", "content": [{"type": "tool-result", "toolCallId": done, "output": "x"}]})
    model = {"ai.operationId": "ai.generateText.doGenerate", "ai.prompt.messages": json.dumps(prompt),
             "ai.response.toolCalls": json.dumps([{"toolCallId": call, "toolName": "lookup_order",
                                                  "input": json.dumps(args)}]),
             "ai.usage.promptTokens": 50 + 10 * step, "ai.usage.completionTokens": 5}
    tool = {"ai.operationId": "ai.toolCall", "ai.toolCall.name": "lookup_order", "ai.toolCall.id": call,
            "ai.toolCall.args": json.dumps(args), "ai.toolCall.result": json.dumps(result)}
    return model, tool


def _genai(step: int, call: str, seen: list[str], args: dict[str, Any], result: str) -> tuple[dict, dict]:
    """The same in this year's GenAI conventions (message parts with call ids)."""
    inputs = [{"role": "user", "parts": [{"type": "text", "content": "help"}]}]
    inputs += [{"role": "tool", "parts": [{"type": "tool_call_response", "id": done, "response": "x"}]}
               for done in seen]
    outputs = [{"role": "assistant", "parts": [{"type": "tool_call", "id": call, "name": "lookup_order",
                                                "arguments": args}]}]
    model = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(inputs),
             "gen_ai.output.messages": json.dumps(outputs), "gen_ai.usage.input_tokens": 50 + 10 * step,
             "gen_ai.usage.output_tokens": 5}
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup_order",
            "gen_ai.tool.call.id": call, "gen_ai.tool.call.arguments": json.dumps(args),
            "gen_ai.tool.call.result": result}
    return model, tool


def _run(shape: Any, looping: bool, rng: random.Random, millisecond_clock: bool) -> tuple[list, dict[bytes, int]]:
    """One agent run of eight steps (a model call, then the tool call it requested) that
    all happen within a few milliseconds, as with a scripted model and instant tools;
    ``millisecond_clock``: starts in whole milliseconds and ends at start + duration, as
    the JavaScript SDK stamps them. Returns the spans (shuffled) and each tool span's step."""
    trace = rng.randbytes(16)
    ids = iter(rng.sample(range(1, 2**63), 40))

    def new_id() -> bytes:
        return next(ids).to_bytes(8, "big")

    root = new_id()

    def stamped(start: int, duration: int) -> tuple[int, int]:
        if millisecond_clock:
            start -= start % MS
        return start, start + duration

    now = T0 + 7 * MS + 100_000
    spans, steps, seen = [], {}, []
    for step in range(1, 9):
        args = {"order_id": "A1"} if looping else {"order_id": f"A{step}"}
        result = "order A1: shipped" if looping else f"order A{step}: shipped"
        call = f"call_{step}_{rng.randrange(10**6)}"
        model_attrs, tool_attrs = shape(step, call, seen, args, result)
        model_id, tool_id = new_id(), new_id()
        duration = rng.randrange(40_000, 300_000)
        spans.append(_span(trace, model_id, root, "model", *stamped(now, duration), model_attrs))
        now += duration + rng.randrange(1_000, 50_000)
        duration = rng.randrange(20_000, 300_000)
        spans.append(_span(trace, tool_id, root, "tool", *stamped(now, duration), tool_attrs))
        steps[tool_id] = step
        now += duration + rng.randrange(1_000, 50_000)
        seen.append(call)
    agent = {"ai.operationId": "ai.generateText", "ai.telemetry.functionId": "support"} \
        if shape is _ai_sdk else {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"}
    spans.append(_span(trace, root, b"", "agent", T0, now + MS, agent))
    rng.shuffle(spans)
    return spans, steps


def _scan(spans: list, steps: dict[bytes, int]) -> list[tuple[str, int, int]]:
    report = analyse_trace([span_record(s) for s in spans], ProgressEngine(Config()))
    # (step 0: a model span, where the model side's detections go)
    return [(d.reason.value, d.turn, steps.get(bytes.fromhex(d.span_id), 0)) for d in report.detections]


def _serve(spans: list, steps: dict[bytes, int], batches: int) -> list[tuple[str, int, int]]:
    detector = BatchDetector(ProgressEngine(Config()))
    ordered = sorted(spans, key=lambda s: s.end_time_unix_nano)  # as an SDK exports them
    size = -(-len(ordered) // batches)
    found = []
    for i in range(0, len(ordered), size):
        result = detector.process(request(ordered[i:i + size]).SerializeToString())
        found += [(d.reason.value, d.turn, steps.get(bytes.fromhex(d.span_id), 0)) for d in result.new_detections]
    return found


def _expected(shape: Any, looping: bool, seed: int) -> list[tuple[str, int, int]]:
    """What the run gets with a precise clock."""
    spans, steps = _run(shape, looping, random.Random(seed), millisecond_clock=False)
    return _scan(spans, steps)


@pytest.mark.parametrize("shape", [_ai_sdk, _genai], ids=["ai_sdk", "genai"])
def test_runs_with_millisecond_starts_get_the_detections_of_a_precise_clock(shape: Any) -> None:
    truth = _expected(shape, True, 0)
    assert truth and "repeat_cycle" in {r for r, _, _ in truth}
    for seed in range(25):  # other span ids, other durations within the millisecond
        spans, steps = _run(shape, True, random.Random(seed), millisecond_clock=True)
        assert _scan(spans, steps) == truth, seed
        assert _serve(spans, steps, 1) == truth, seed
        # In three requests a step's spans may come after a later step's: a detection is
        # streamed once, at its turn, on the span that completed the turn when it streamed
        # (by the signal that saw the loop first on what had arrived).
        served = _serve(spans, steps, 3)
        assert [t for _, t, _ in served] == [t for _, t, _ in truth], seed


@pytest.mark.parametrize("shape", [_ai_sdk, _genai], ids=["ai_sdk", "genai"])
def test_a_healthy_run_with_millisecond_starts_stays_quiet(shape: Any) -> None:
    assert _expected(shape, False, 0) == []
    for seed in range(25):
        spans, steps = _run(shape, False, random.Random(seed), millisecond_clock=True)
        assert _scan(spans, steps) == [] == _serve(spans, steps, 2), seed


def test_without_the_causal_order_the_span_ids_decide(monkeypatch: pytest.MonkeyPatch) -> None:
    # the proof the test above can fail: ordered by span id, ties cut the run into other steps
    truth = _expected(_ai_sdk, True, 0)
    monkeypatch.setattr(replay, "causal_times", lambda spans: {})
    found = []
    for seed in range(25):
        spans, steps = _run(_ai_sdk, True, random.Random(seed), millisecond_clock=True)
        found.append(_scan(spans, steps))
    assert any(f != truth for f in found)


def test_a_precise_clock_reads_no_call_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(span: Any) -> Any:
        raise AssertionError("call ids read for spans the clock orders")

    monkeypatch.setattr(causal, "read_call_links", refuse)
    spans, steps = _run(_ai_sdk, True, random.Random(3), millisecond_clock=False)
    assert _scan(spans, steps) == _expected(_ai_sdk, True, 3)


def test_a_chain_of_steps_within_one_millisecond_is_put_in_causal_order() -> None:
    spans, _ = _run(_genai, True, random.Random(5), millisecond_clock=True)
    records = [span_record(s) for s in spans]
    kinds = [(r, classify(r)) for r in records]
    order = [(o[3], o[4].attributes.get("gen_ai.tool.call.id") or o[4].attributes.get("gen_ai.output.messages"))
             for o in replay.in_replay_order(kinds) if o[3] in (replay.MODEL_START, replay.TOOL_START)]
    calls = [json.loads(str(v))[0]["parts"][0]["id"] if k == replay.MODEL_START else v for k, v in order]
    # each model call, then the call it requested: M1 T1 M2 T2 ...
    assert [k for k, _ in order] == [replay.MODEL_START, replay.TOOL_START] * 8
    assert calls[0::2] == calls[1::2]
