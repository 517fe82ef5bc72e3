"""A scripted OpenAI Responses API on 127.0.0.1, for running the real Codex CLI offline.

Codex talks to a custom model provider (``model_providers.<id>`` with ``base_url`` and
``wire_api = "responses"``) by ``POST {base_url}/responses`` with ``stream: true`` and reads
server-sent events: ``response.created``, ``response.output_item.done`` (a ``message``,
a ``function_call`` or a ``custom_tool_call`` item) and ``response.completed`` (with the
``usage`` token counts that Codex logs in its ``codex.sse_event`` records).

The script is a list of :class:`Step`. Which step answers a request is decided by the
request itself: the number of tool outputs (``function_call_output`` /
``custom_tool_call_output`` items) already in its ``input``. A retried request therefore
gets the same answer, and any other request Codex makes (none is needed here) is answered
with the final message. The shell tool's name and argument shape are taken from the
``tools`` the request offers (``exec_command`` with ``cmd``, ``shell`` with an argv
``command`` or ``shell_command`` with a string ``command``), so the script names only the
command line.

Compaction: Codex compacts a custom provider's conversation itself
(``model_auto_compact_token_limit`` in ``config.toml``): it sends the history with a last
user message beginning ``You are performing a CONTEXT CHECKPOINT COMPACTION``, answered
here with a handoff summary (kept in :attr:`FakeResponsesAPI.compactions`). ``context``
gives, per scripted step, the input tokens its answer reports: a step reported above the
limit makes Codex compact after it. A compaction rewrites the history, so with ``context``
the step is not counted from the tool outputs in the request but is the number of
agent-loop requests answered so far.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .fake_api import FakeAPI, Reply, json_reply, scripted, typed_sse

__all__ = ["FakeResponsesAPI", "Step"]


@dataclass(frozen=True)
class Step:
    """One scripted model turn: run ``command`` in the shell tool (returning after
    ``yield_ms`` if set), apply ``patch`` with ``apply_patch``, ``poll`` the process the last
    output says is still running (``write_stdin`` with no input; once it has exited the
    turn answers ``message`` instead), or answer ``message`` and end the turn."""

    command: str | None = None
    patch: str | None = None
    message: str | None = None
    yield_ms: int | None = None
    poll: bool = False


def _tool_names(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    names: dict[str, dict[str, Any]] = {}
    for tool in body.get("tools") or ():
        if isinstance(tool, dict):
            name = tool.get("name") or (tool.get("function") or {}).get("name")
            if isinstance(name, str):
                names[name] = tool
    return names


_SESSION = re.compile(r"Process running with session ID (\d+)")


def _last_output(body: dict[str, Any]) -> str:
    """The text of the last tool output in the request's input."""
    text = ""
    for item in body.get("input") or ():
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            if isinstance(output, list):
                output = "".join(p.get("text", "") for p in output if isinstance(p, dict))
            text = output if isinstance(output, str) else json.dumps(output)
    return text


#: The handoff summary a compaction request gets.
_HANDOFF = "Progress: notes.txt was read. Next: act on its two lines."
_HANDOFF_TOKENS = 200  # what the summariser's own request reports (below any limit the tests set)
_COMPACTION_PROMPT = "CONTEXT CHECKPOINT COMPACTION"


def _asks_for_compaction(body: dict[str, Any]) -> bool:
    """Whether a request is Codex's own compaction call (its last input item is the user
    message asking for a handoff summary)."""
    items = body.get("input") or ()
    last = items[-1] if items else None
    if not isinstance(last, dict) or last.get("role") != "user":
        return False
    return any(isinstance(p, dict) and _COMPACTION_PROMPT in str(p.get("text", ""))
               for p in last.get("content") or ())


def _outputs_so_far(body: dict[str, Any]) -> int:
    count = 0
    for item in body.get("input") or ():
        if isinstance(item, dict) and item.get("type") in (
            "function_call_output",
            "custom_tool_call_output",
        ):
            count += 1
    return count


class FakeResponsesAPI(FakeAPI):
    """The scripted server. Use as a context manager; ``base_url`` ends in ``/v1``.

    Attributes:
        requests: every decoded request body, in arrival order.
        usage: the token counts sent with every ``response.completed``.
    """

    def __init__(self, steps: list[Step], usage: tuple[int, int] = (1200, 40),
                 context: list[int] | None = None) -> None:
        self.steps = list(steps)
        self.usage = usage
        self.context = list(context) if context is not None else None
        self.compactions: list[dict[str, Any]] = []
        self._turns = 0
        super().__init__()

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    # -- the answer to one request -------------------------------------------------------

    def _index(self, body: dict[str, Any]) -> tuple[int | None, int]:
        """The script step answering an agent-loop request (``None``: a compaction), and
        the input tokens to report."""
        inp = self.usage[0]
        if _asks_for_compaction(body):
            with self._lock:
                self.compactions.append(body)
            return None, _HANDOFF_TOKENS
        if self.context is None:
            return _outputs_so_far(body), inp
        with self._lock:
            index, self._turns = self._turns, self._turns + 1
        return index, scripted(self.context, index, inp)

    def _events(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        number = self.keep(body)
        index, inp = self._index(body)
        if index is None:
            return self._completed(number, {"type": "message", "role": "assistant", "id": f"msg_{number:03d}",
                                            "content": [{"type": "output_text", "text": _HANDOFF}]}, inp)
        step = scripted(self.steps, index, Step(message="Done."))
        tools = _tool_names(body)
        call_id = f"call_{index:03d}"
        running = _SESSION.search(_last_output(body)) if step.poll else None
        if running is not None:
            item = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": "write_stdin",
                    "arguments": json.dumps({"session_id": int(running.group(1)), "chars": "",
                                             "yield_time_ms": step.yield_ms or 1000})}
        elif step.command is not None:
            item = self._shell_call(step.command, tools, call_id, step.yield_ms)
        elif step.patch is not None:
            item = self._patch_call(step.patch, tools, call_id)
        else:  # a message, or a poll whose process has exited
            item = {
                "type": "message",
                "role": "assistant",
                "id": f"msg_{number:03d}",
                "content": [{"type": "output_text", "text": step.message or "Done."}],
            }
        return self._completed(number, item, inp)

    def _completed(self, number: int, item: dict[str, Any], inp: int) -> list[dict[str, Any]]:
        response_id = f"resp_{number:03d}"
        out = self.usage[1]
        return [
            {"type": "response.created", "response": {"id": response_id}},
            {"type": "response.output_item.done", "item": item},
            {
                "type": "response.completed",
                "response": {
                    "id": response_id,
                    "usage": {
                        "input_tokens": inp,
                        "input_tokens_details": {"cached_tokens": 0},
                        "output_tokens": out,
                        "output_tokens_details": {"reasoning_tokens": 0},
                        "total_tokens": inp + out,
                    },
                },
            },
        ]

    @staticmethod
    def _shell_call(command: str, tools: dict[str, dict[str, Any]], call_id: str,
                    yield_ms: int | None = None) -> dict:
        if "exec_command" in tools:
            name, args = "exec_command", {"cmd": command}
            if yield_ms is not None:
                args["yield_time_ms"] = yield_ms
        elif "shell_command" in tools:
            name, args = "shell_command", {"command": command}
        else:
            name, args = "shell", {"command": ["bash", "-lc", command]}
        return {
            "type": "function_call",
            "id": f"fc_{call_id}",
            "call_id": call_id,
            "name": name,
            "arguments": json.dumps(args),
        }

    @staticmethod
    def _patch_call(patch: str, tools: dict[str, dict[str, Any]], call_id: str) -> dict:
        tool = tools.get("apply_patch") or {}
        if tool.get("type") == "custom":
            return {
                "type": "custom_tool_call",
                "id": f"ctc_{call_id}",
                "call_id": call_id,
                "name": "apply_patch",
                "input": patch,
            }
        return {
            "type": "function_call",
            "id": f"fc_{call_id}",
            "call_id": call_id,
            "name": "apply_patch",
            "arguments": json.dumps({"input": patch}),
        }

    def get(self, path: str) -> Reply:  # /models and the like: nothing to offer
        return json_reply(b'{"object":"list","data":[],"models":[]}')

    def post(self, path: str, body: dict[str, Any]) -> Reply:
        if not path.rstrip("/").endswith("/responses"):
            return 404, b"", None
        return 200, b"".join(typed_sse(event) for event in self._events(body)), "text/event-stream"
