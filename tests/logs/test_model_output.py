"""The model's side of a step in coding agents' logs: Gemini CLI's ``gemini_cli.api_response``
records carry the whole response in ``response_text`` while ``logPrompts`` is on
(``LoggingContentGenerator._logApiResponse``, gemini-cli 0.61.0); the run tracker hands each
of the agent's own responses (``role = main``) to :meth:`ProgressEngine.observe_model` with
its run and a stable id, in the run's order. The golden capture is
``tests/coding_agents/golden/gemini-cli-0.61.0-loop.jsonl`` (the real CLI)."""

from __future__ import annotations

import json

from otel_progress import ProgressEngine
from otel_progress.conventions.logs.agents.gemini_cli import GeminiCliConvention
from otel_progress.conventions.logs.record import LogRecordView
from otel_progress.model import Detection, ModelOutput, ToolRequest
from otel_progress.otlp.logs_json import records_from_request
from otel_progress.runs.logruns import LogRunTracker

from .conftest import documents, golden


class RecordingEngine(ProgressEngine):
    def __init__(self) -> None:
        super().__init__()
        self.outputs: list[ModelOutput] = []

    def observe_model(self, output: ModelOutput, *, now: float | None = None) -> list[Detection]:
        self.outputs.append(output)
        return []


def _outputs(name: str) -> list[ModelOutput]:
    engine = RecordingEngine()
    tracker = LogRunTracker(engine)
    index = 0
    for doc in documents(golden(name)):
        for record in records_from_request(doc, start_index=index):
            index += 1
            tracker.add(record)
    tracker.finish()
    return engine.outputs


def test_gemini_cli_responses_reach_the_engine() -> None:
    outputs = _outputs("gemini-cli-0.61.0-loop.jsonl")
    # eight function calls alternating `cat notes.txt` and `ls`, then the answer; the model
    # router's request (role utility_router) is no step of the agent
    commands = ["cat notes.txt", "ls"] * 4
    assert [o.requests for o in outputs[:-1]] == [
        (ToolRequest("run_shell_command", {"command": c}, f"run_shell_command__call_{i:03d}"),)
        for i, c in enumerate(commands)]
    assert [o.text for o in outputs] == [None] * 8 + ["Same notes."]
    assert outputs[-1].requests == ()
    run = outputs[0].run_id
    assert run.startswith("gemini_cli|") and all(o.run_id == o.trace_id == run for o in outputs)
    assert len({o.span_id for o in outputs}) == 9 and all(o.span_id for o in outputs)
    assert all(o.agent == "gemini-cli" for o in outputs)
    assert outputs == _outputs("gemini-cli-0.61.0-loop.jsonl")  # the ids are stable


def test_without_logprompts_no_output() -> None:
    # edits-no-prompts: logPrompts off, so no response_text
    assert _outputs("gemini-cli-0.61.0-edits-no-prompts.jsonl") == []


def _api_response(attributes: dict) -> ModelOutput | None:
    record = LogRecordView(time_ns=5, event_name="gemini_cli.api_response", attributes={
        "event.name": "gemini_cli.api_response", "session.id": "s", "prompt_id": "p", "input_token_count": 9,
        "output_token_count": 3, **attributes})
    observation = GeminiCliConvention().read(record)
    assert observation is not None and observation.kind == "tokens" and observation.tokens == 12
    return observation.output


def test_a_streamed_response_with_thoughts() -> None:
    # a streamed response: a list of chunks (loggingContentGenerator.ts); a part with
    # `thought: true` is the model's reasoning (@google/genai Part)
    chunks = [{"candidates": [{"content": {"role": "model", "parts": [{"text": "Check the ", "thought": True}]}}]},
              {"candidates": [{"content": {"role": "model", "parts": [{"text": "log.", "thought": True},
                                                                      {"text": "Reading "}]}}]},
              {"candidates": [{"content": {"role": "model", "parts": [
                  {"text": "it."}, {"functionCall": {"name": "read_file", "args": {"path": "a.log"}}}]}}]}]
    out = _api_response({"role": "main", "response_text": json.dumps(chunks)})
    assert out is not None
    assert (out.text, out.reasoning) == ("Reading it.", "Check the log.")
    assert out.requests == (ToolRequest("read_file", {"path": "a.log"}, None),)
    assert _api_response({"role": "utility_router", "response_text": json.dumps(chunks)}) is None
    for odd in (None, 3, "not json", "[1, {\"candidates\": 5}]", ["x"], {"candidates": [{"content": {"parts": 7}}]}):
        assert _api_response({"role": "main", "response_text": odd}) is None
