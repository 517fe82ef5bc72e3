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
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


def _outputs_so_far(body: dict[str, Any]) -> int:
    count = 0
    for item in body.get("input") or ():
        if isinstance(item, dict) and item.get("type") in (
            "function_call_output",
            "custom_tool_call_output",
        ):
            count += 1
    return count


class FakeResponsesAPI:
    """The scripted server. Use as a context manager; ``base_url`` ends in ``/v1``.

    Attributes:
        requests: every decoded request body, in arrival order.
        usage: the token counts sent with every ``response.completed``.
    """

    def __init__(self, steps: list[Step], usage: tuple[int, int] = (1200, 40)) -> None:
        self.steps = list(steps)
        self.usage = usage
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeResponsesAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- the answer to one request -------------------------------------------------------

    def _events(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
            number = len(self.requests)
        index = _outputs_so_far(body)
        step = self.steps[index] if index < len(self.steps) else Step(message="Done.")
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
        response_id = f"resp_{number:03d}"
        inp, out = self.usage
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

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # /models and the like: nothing to offer
                payload = b'{"object":"list","data":[],"models":[]}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                if not self.path.rstrip("/").endswith("/responses"):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                chunks = []
                for event in api._events(body if isinstance(body, dict) else {}):
                    data = json.dumps(event)
                    chunks.append(f"event: {event['type']}\ndata: {data}\n\n")
                payload = "".join(chunks).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler
