"""The input tokens of a model call, per convention (issue 29, item 7): the context the
model read, cached input included."""

from __future__ import annotations

from otel_progress.conventions.spans import SpanRecord, read_input_tokens, read_tokens


def _span(name: str, **attributes: object) -> SpanRecord:
    return SpanRecord("a" * 32, "b" * 16, name=name, attributes=attributes)


def test_each_span_convention_gives_its_input_tokens() -> None:
    cases = [
        (_span("chat gpt-4o", **{"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 1200,
                                 "gen_ai.usage.output_tokens": 30}), 1200, 1230),
        (_span("chat", **{"gen_ai.operation.name": "chat", "gen_ai.usage.prompt_tokens": 800,
                          "gen_ai.usage.completion_tokens": 20}), 800, 820),
        (_span("ChatOpenAI", **{"openinference.span.kind": "LLM", "llm.token_count.prompt": 640,
                                "llm.token_count.completion": 12}), 640, 652),
        (_span("ai.generateText.doGenerate", **{"ai.operationId": "ai.generateText.doGenerate",
                                                "ai.usage.inputTokens": 333, "ai.usage.outputTokens": 7}), 333, 340),
        (_span("claude_code.llm_request", **{"span.type": "llm_request", "input_tokens": 10, "output_tokens": 5,
                                             "cache_read_tokens": 90000, "cache_creation_tokens": 500}), 90510, 15),
    ]
    for span, input_tokens, tokens in cases:
        assert read_input_tokens(span) == input_tokens, span.name
        assert read_tokens(span) == tokens, span.name


def test_no_usage_no_input_tokens() -> None:
    assert read_input_tokens(_span("chat", **{"gen_ai.operation.name": "chat"})) == 0
    assert read_input_tokens(_span("execute_tool x", **{"gen_ai.operation.name": "execute_tool"})) == 0
    assert read_input_tokens(_span("chat", **{"gen_ai.operation.name": "chat",
                                              "gen_ai.usage.input_tokens": -5})) == 0
