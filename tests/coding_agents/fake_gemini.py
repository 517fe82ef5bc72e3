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

Compression: ``context`` gives, per step, the ``promptTokenCount`` its answer reports; a
step reported above half the model's token limit (Gemini CLI's default
``compressionThreshold``, 0.5 of 1,048,576) makes Gemini CLI compress the history before its
next turn. Its summariser asks with ``generateContent`` for a ``<state_snapshot>`` (twice:
a draft, then a check), answered here with a snapshot and kept in
:attr:`FakeGeminiAPI.compressions`. A compression rewrites the history, so with ``context``
the step is the number of streamed turns answered so far.
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


#: The summary a compression request gets (Gemini CLI asks for a ``<state_snapshot>``).
_SNAPSHOT = ("<state_snapshot>\n<overall_goal>Work on notes.txt.</overall_goal>\n"
             "<key_knowledge>notes.txt has two lines.</key_knowledge>\n</state_snapshot>")


def _asks_for_snapshot(body: dict[str, Any]) -> bool:
    """Whether a ``generateContent`` request is the compression summariser's (its last
    user part asks for a ``<state_snapshot>``)."""
    contents = body.get("contents") or ()
    last = contents[-1] if contents else None
    if not isinstance(last, dict):
        return False
    return any(isinstance(p, dict) and "<state_snapshot>" in str(p.get("text", "")) for p in last.get("parts") or ())


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

    def __init__(self, steps: list[Step], usage: tuple[int, int] = (900, 30),
                 context: list[int] | None = None) -> None:
        self.steps = list(steps)
        self.usage = usage
        self.context = list(context) if context is not None else None
        self.compressions: list[dict[str, Any]] = []
        self._turns = 0
        super().__init__()

    @property
    def base_url(self) -> str:
        return self.root

    def _usage(self, prompt: int | None = None) -> dict[str, int]:
        candidates = self.usage[1]
        prompt = self.usage[0] if prompt is None else prompt
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

    def _snapshot(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.compressions.append(body)
        return {
            "candidates": [{"content": {"role": "model", "parts": [{"text": _SNAPSHOT}]},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": self._usage(),
            "modelVersion": "gemini-2.5-flash",
        }

    def _turn(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt: int | None = None
        if self.context is None:
            index = _function_responses(body)
        else:
            with self._lock:
                index, self._turns = self._turns, self._turns + 1
            prompt = scripted(self.context, index, self.usage[0])
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
            "usageMetadata": self._usage(prompt),
            "modelVersion": "gemini-2.5-flash",
        }

    def get(self, path: str) -> Reply:
        return json_reply(b'{"models":[]}')

    def post(self, path: str, body: dict[str, Any]) -> Reply:
        self.keep((path, body))
        if ":streamGenerateContent" in path:
            return 200, sse(self._turn(body), eol="\r\n"), "text/event-stream"
        if ":generateContent" in path:
            if _asks_for_snapshot(body):
                return json_reply(self._snapshot(body))
            return json_reply(self._classifier())
        if ":countTokens" in path:
            return json_reply(b'{"totalTokens": 10}')
        return json_reply(b"{}", 404)
