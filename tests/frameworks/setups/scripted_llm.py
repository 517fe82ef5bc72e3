"""What the Strands, Google ADK, smolagents, CrewAI and Agno set-ups add to the shared
scripted model (``_common/scripted.py``: the tools, each scenario's script, ``FakeOpenAI``):

* :class:`ScriptedOpenAI`: ``FakeOpenAI`` reading the step from the number of model turns
  already taken (smolagents sends its tool results as user messages, so they cannot be
  counted as tool messages) and, where the request offers a ``final_answer`` tool
  (smolagents ends a run that way), answering through it;
* :class:`FakeGemini`: the same script as a Gemini API server
  (``POST .../models/{model}:generateContent`` and ``:streamGenerateContent``) for
  google-genai clients such as ADK's ``Gemini`` model.

Both listen on 127.0.0.1. Import with ``sys.path.insert(0, <setups directory>)``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "_common"))

from scripted import SCENARIOS, FakeOpenAI, JSONHandler, LocalServer, lookup_order, next_step, search_docs, send_json

__all__ = ["SCENARIOS", "FakeGemini", "ScriptedOpenAI", "lookup_order", "search_docs"]


def turns_done(messages: Sequence[Any]) -> int:
    """Model turns already taken in an OpenAI conversation: its assistant messages, or its
    tool results where a framework sends its tool calls some other way."""
    assistant = results = 0
    for m in messages:
        if isinstance(m, dict):
            assistant += m.get("role") == "assistant"
            results += m.get("role") in ("tool", "function")
    return max(assistant, results)


def _offers_final_answer(tools: Any) -> bool:
    return any(isinstance(t, dict) and (t.get("function") or {}).get("name") == "final_answer" for t in tools or ())


class ScriptedOpenAI(FakeOpenAI):
    """``FakeOpenAI`` stepping on model turns, answering through a ``final_answer`` tool
    when the request offers one."""

    def __init__(self, scenario: str) -> None:
        super().__init__(scenario, step_of=turns_done)

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        message = super().reply(body)
        if not message.get("tool_calls") and _offers_final_answer(body.get("tools")):
            call = {"id": f"call_{self.requests}", "type": "function",
                    "function": {"name": "final_answer", "arguments": json.dumps({"answer": message["content"]})}}
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        return message


def _gemini_turns_done(contents: Sequence[Any]) -> int:
    model = results = 0
    for c in contents:
        if not isinstance(c, dict):
            continue
        model += c.get("role") == "model"
        for part in c.get("parts") or ():
            results += isinstance(part, dict) and ("functionResponse" in part or "function_response" in part)
    return max(model, results)


class FakeGemini(LocalServer):
    """The scenario's script as a Gemini API server on 127.0.0.1 (``base_url``, no path):
    one function call per reply, then the answer; ``requests`` counts the replies."""

    def __init__(self, scenario: str) -> None:
        self.scenario = scenario
        super().__init__()

    @property
    def base_url(self) -> str:
        return self.root

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        """The ``GenerateContentResponse`` for one request body."""
        self.requests += 1
        step = next_step(self.scenario, _gemini_turns_done(body.get("contents") or ()))
        if isinstance(step, str):
            parts: list[Any] = [{"text": step}]
        else:
            name, args = step
            parts = [{"functionCall": {"name": name, "args": args}}]
        return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 120, "candidatesTokenCount": 20, "totalTokenCount": 140},
                "modelVersion": "fake-model"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(JSONHandler):
            def do_POST(self) -> None:
                body = self.json_body()
                path = self.path.split("?", 1)[0]
                if ":generateContent" not in path and ":streamGenerateContent" not in path:
                    self.not_found(path)
                    return
                reply = fake.reply(body)
                if ":streamGenerateContent" not in path:
                    send_json(self, 200, reply)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                self.wfile.write(b"data: " + json.dumps(reply).encode() + b"\n\n")
                self.wfile.flush()
                self.close_connection = True

        return Handler
