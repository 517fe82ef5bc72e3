"""A scripted Gemini API (``generativelanguage`` v1beta) on 127.0.0.1, for running the real
Gemini CLI offline.

Gemini CLI honours ``GOOGLE_GEMINI_BASE_URL`` with a ``GEMINI_API_KEY``. Per prompt it first
asks a routing classifier with a non-streaming ``POST /v1beta/models/{model}:generateContent``
and expects a JSON text (``complexity_reasoning`` / ``complexity_score``; older builds read
``reasoning`` / ``model_choice``, so both are sent); the agent's turns are
``:streamGenerateContent?alt=sse`` requests answered with server-sent ``data:`` chunks of
``GenerateContentResponse``. Other non-streaming checks it may make (loop or next-speaker
checks) get the same JSON, which they ignore or read as "nothing to do".

The script is a list of :class:`Step`. Which step answers a streaming request is decided by
the request: the number of ``functionResponse`` parts already in its ``contents``, so a
retried request gets the same answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .fake_api import FakeAPI, Reply, json_reply, scripted, sse

__all__ = ["FakeGeminiAPI", "Step"]

_CLASSIFIER = json.dumps(
    {
        "complexity_reasoning": "A short scripted task.",
        "complexity_score": 10,
        "reasoning": "A short scripted task.",
        "model_choice": "flash",
    }
)


@dataclass(frozen=True)
class Step:
    """One scripted model turn: call ``tool`` with ``args``, or answer ``message``."""

    tool: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    message: str | None = None


def _function_responses(body: dict[str, Any]) -> int:
    count = 0
    for content in body.get("contents") or ():
        if not isinstance(content, dict):
            continue
        for part in content.get("parts") or ():
            if isinstance(part, dict) and "functionResponse" in part:
                count += 1
    return count


class FakeGeminiAPI(FakeAPI):
    """The scripted server. Use as a context manager; ``base_url`` is the host root.

    Attributes:
        requests: ``(path, decoded body)`` of every request, in arrival order.
        usage: ``(prompt, candidates)`` token counts sent with every answer.
    """

    def __init__(self, steps: list[Step], usage: tuple[int, int] = (900, 30)) -> None:
        self.steps = list(steps)
        self.usage = usage
        super().__init__()

    @property
    def base_url(self) -> str:
        return self.root

    def _usage(self) -> dict[str, int]:
        prompt, candidates = self.usage
        return {
            "promptTokenCount": prompt,
            "candidatesTokenCount": candidates,
            "totalTokenCount": prompt + candidates,
        }

    def _classifier(self) -> dict[str, Any]:
        return {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": _CLASSIFIER}]},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": self._usage(),
            "modelVersion": "gemini-2.5-flash",
        }

    def _turn(self, body: dict[str, Any]) -> dict[str, Any]:
        index = _function_responses(body)
        step = scripted(self.steps, index, Step(message="Done."))
        if step.tool is not None:
            part: dict[str, Any] = {
                "functionCall": {"name": step.tool, "args": step.args, "id": f"call_{index:03d}"}
            }
        else:
            part = {"text": step.message or "Done."}
        return {
            "candidates": [
                {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": self._usage(),
            "modelVersion": "gemini-2.5-flash",
        }

    def get(self, path: str) -> Reply:
        return json_reply(b'{"models":[]}')

    def post(self, path: str, body: dict[str, Any]) -> Reply:
        self.keep((path, body))
        if ":streamGenerateContent" in path:
            return 200, sse(self._turn(body), eol="\r\n"), "text/event-stream"
        if ":generateContent" in path:
            return json_reply(self._classifier())
        if ":countTokens" in path:
            return json_reply(b'{"totalTokens": 10}')
        return json_reply(b"{}", 404)
