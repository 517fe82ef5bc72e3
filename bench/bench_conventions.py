"""Cost of reading one tool span, per span convention, beside the cost of one ``json.loads``
of the same result (the cheapest thing any reader of that result must do) and the engine's
cost for the call.

    python bench/bench_conventions.py [--rounds N]

Prints microseconds per span and the ratios; none of it is a pass/fail test (shared,
noisy machines: read the ratios of one run).
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from otel_progress.conventions.spans import SpanRecord, classify, read_tool_call
from otel_progress.engine import ProgressEngine
from otel_progress.engine.config import Config

ARGS = json.dumps({"query": "x" * 180})
RESULT = json.dumps({"items": ["y" * 100] * 18})  # ~2 KB


def _spans() -> dict[str, SpanRecord]:
    def rec(name: str, attrs: dict, events: tuple = ()) -> SpanRecord:
        return SpanRecord("a" * 32, "b" * 16, "c" * 16, name, 1, 2, attrs, False, "", events)

    callback = json.dumps({"input_str": "{'query': 'x'}", "tags": [], "metadata": {"langgraph_step": 3},
                           "inputs": json.loads(ARGS), "kwargs": {"tool_call_id": "call_1"}})
    message = json.dumps({"output": {"lc": 1, "type": "constructor", "id": ["ToolMessage"],
                                     "kwargs": {"content": RESULT, "tool_call_id": "call_1"}}, "kwargs": {}})
    return {
        "genai": rec("execute_tool search", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                                             "gen_ai.tool.call.arguments": ARGS, "gen_ai.tool.call.result": RESULT}),
        "openinference": rec("search", {"openinference.span.kind": "TOOL", "tool.name": "search",
                                        "input.value": ARGS, "output.value": RESULT}),
        "openllmetry langgraph (envelopes)": rec("execute_tool search", {
            "traceloop.span.kind": "tool", "gen_ai.operation.name": "execute_tool", "traceloop.entity.name": "search",
            "traceloop.entity.input": callback, "traceloop.entity.output": message}),
        "strands (events)": rec("execute_tool search", {"gen_ai.operation.name": "execute_tool",
                                                        "gen_ai.tool.name": "search"},
                                (("gen_ai.tool.message", {"role": "tool", "content": ARGS, "id": "t1"}),
                                 ("gen_ai.choice", {"message": json.dumps([{"text": RESULT}]), "id": "t1"}))),
        "ai_sdk (ai.toolCall)": rec("ai.toolCall", {"ai.operationId": "ai.toolCall", "ai.toolCall.name": "search",
                                                     "ai.toolCall.id": "call_1", "ai.toolCall.args": ARGS,
                                                     "ai.toolCall.result": RESULT}),
        "openllmetry_js langchain": rec("execute_tool DynamicStructuredTool", {
            "gen_ai.operation.name": "execute_tool", "traceloop.span.kind": "task",
            "traceloop.entity.name": "DynamicStructuredTool", "traceloop.entity.input": json.dumps({"args": [ARGS]}),
            "traceloop.entity.output": json.dumps({"lc": 1, "type": "constructor", "id": ["ToolMessage"],
                                                   "kwargs": {"content": RESULT, "name": "search",
                                                              "tool_call_id": "call_1"}})}),
        "plain span (classify only)": rec("GET /", {"http.request.method": "GET", "url.path": "/"}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20000)
    n = parser.parse_args().rounds

    def per_call(fn: object) -> float:
        return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6  # type: ignore[arg-type]

    loads = per_call(lambda: json.loads(RESULT))
    engine = ProgressEngine(Config())
    genai = _spans()["genai"]
    counter = iter(range(10**9))

    def observe() -> None:
        i = next(counter)
        call = read_tool_call(genai)
        call.trace_id = f"{i // 20:032x}"  # runs of 20 calls, as in an agent
        engine.observe(call, flush=True)

    engine_cost = per_call(observe)
    print(f"json.loads of the ~2 KB result: {loads:.2f} us; read + engine.observe (GenAI): {engine_cost:.2f} us\n")
    print(f"{'span':<36} {'classify us':>11} {'read us':>9} {'read/loads':>10} {'read/(read+engine)':>18}")
    for label, span in _spans().items():
        c = per_call(lambda span=span: classify(span))
        if label.startswith("plain"):
            print(f"{label:<36} {c:>11.2f} {'-':>9} {'-':>10} {'-':>18}")
            continue
        r = per_call(lambda span=span: read_tool_call(span))
        print(f"{label:<36} {c:>11.2f} {r:>9.2f} {r / loads:>10.2f} {r / engine_cost:>18.2f}")


if __name__ == "__main__":
    main()
