"""A scripted model for the framework matrix: a fake OpenAI- and Gemini-compatible HTTP
server on 127.0.0.1, started by the agent script itself, plus the two tools every set-up
registers.

The server plays one of three scenarios, deciding each reply from the request alone (how
many model turns the conversation already holds), so it works for any framework that
sends the whole conversation each turn; where the request offers a ``final_answer`` tool
the last reply calls it instead of answering in text:

* ``loop``: ``lookup_order(order_id="A-1001")`` six times (identical call, identical
  result), then a final answer;
* ``empty_search``: ``search_docs(query=...)`` six times, each query rephrased, each
  answered ``No results found.``, then a final answer;
* ``healthy``: three different orders looked up (different results), then a final answer.

Endpoints: OpenAI ``POST .../chat/completions`` (streamed as server-sent events when the
request says ``stream``), OpenAI ``POST .../responses`` is not served; Gemini
``POST .../models/{model}:generateContent`` and ``:streamGenerateContent``. Any other path
gets 404. Used by the set-ups under ``tests/frameworks/setups/`` (import it with
``sys.path.insert(0, <setups dir>)``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["SCENARIOS", "ScriptedLLM", "final_answer", "lookup_order", "plan", "search_docs"]

SCENARIOS = ("loop", "empty_search", "healthy")

_QUERIES = (
    "refund policy for damaged items",
    "damaged item refund rules",
    "how to get money back for a broken product",
    "return policy broken goods",
    "refund damaged delivery",
    "compensation for items damaged in shipping",
)
_ORDERS = {
    "A-1001": "Order A-1001: 2 items, shipped, carrier DHL, tracking 7731",
    "A-1002": "Order A-1002: 1 item, delivered, signed by J. Doe",
    "A-1003": "Order A-1003: 3 items, awaiting payment confirmation from the bank",
}


def lookup_order(order_id: str) -> str:
    """Look up an order by its id and return its details.

    Args:
        order_id: the order id, such as A-1001
    """
    return _ORDERS.get(order_id, f"Order {order_id}: unknown")


def search_docs(query: str) -> str:
    """Search the help-centre documents.

    Args:
        query: what to search for
    """
    del query
    return "No results found."


def plan(scenario: str) -> list[tuple[str, dict[str, str]]]:
    """The tool calls the scripted model makes in a scenario, in order."""
    if scenario == "loop":
        return [("lookup_order", {"order_id": "A-1001"})] * 6
    if scenario == "empty_search":
        return [("search_docs", {"query": q}) for q in _QUERIES]
    if scenario == "healthy":
        return [("lookup_order", {"order_id": oid}) for oid in _ORDERS]
    raise ValueError(f"unknown scenario {scenario!r}; expected one of {', '.join(SCENARIOS)}")


def final_answer(scenario: str) -> str:
    """The scripted model's last message in a scenario."""
    return {
        "loop": "Order A-1001 has shipped.",
        "empty_search": "I could not find the refund policy.",
        "healthy": "All three orders are accounted for.",
    }[scenario]


def _openai_turns_done(messages: Sequence[Any]) -> int:
    """Model turns already taken: the assistant messages, or the tool results where a
    framework folds its tool calls into another role."""
    assistant = results = 0
    for m in messages:
        if isinstance(m, dict):
            assistant += m.get("role") == "assistant"
            results += m.get("role") in ("tool", "function")
    return max(assistant, results)


def _gemini_turns_done(contents: Sequence[Any]) -> int:
    model = results = 0
    for c in contents:
        if not isinstance(c, dict):
            continue
        model += c.get("role") == "model"
        for part in c.get("parts") or ():
            results += isinstance(part, dict) and ("functionResponse" in part or "function_response" in part)
    return max(model, results)


def _offers_final_answer_tool(tools: Any) -> bool:
    """Whether the request offers a ``final_answer`` tool (smolagents ends a run that way)."""
    return any(isinstance(t, dict) and (t.get("function") or {}).get("name") == "final_answer" for t in tools or ())


class ScriptedLLM:
    """The fake model server. ``with ScriptedLLM("loop") as llm:`` starts it on a free port
    of 127.0.0.1; ``llm.openai_base_url`` (``http://127.0.0.1:PORT/v1``) and
    ``llm.base_url`` (no path) say where. Stops on exit. ``requests`` counts the model
    requests served."""

    def __init__(self, scenario: str) -> None:
        self.scenario = scenario
        self.steps = plan(scenario)
        self.requests = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "server not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def openai_base_url(self) -> str:
        return self.base_url + "/v1"

    def next_step(self, done: int) -> tuple[str, dict[str, str]] | None:
        """The tool call to make after ``done`` tool results, or None for the final answer."""
        with self._lock:
            self.requests += 1
        return self.steps[done] if done < len(self.steps) else None

    def start(self) -> ScriptedLLM:
        llm = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_GET(self) -> None:
                self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    self._send(400, {"error": {"message": "bad json"}})
                    return
                path = self.path.split("?", 1)[0]
                if path.endswith("/chat/completions"):
                    self._openai(body)
                elif ":generateContent" in path or ":streamGenerateContent" in path:
                    self._gemini(body, stream=":streamGenerateContent" in path)
                else:
                    self._send(404, {"error": {"message": f"no such endpoint {path}"}})

            def _send(self, code: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, chunks: list[Any], done: bool) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                if done:
                    self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

            def _openai(self, body: dict[str, Any]) -> None:
                step = llm.next_step(_openai_turns_done(body.get("messages") or ()))
                if step is None and _offers_final_answer_tool(body.get("tools")):
                    step = ("final_answer", {"answer": final_answer(llm.scenario)})
                model = body.get("model") or "scripted"
                created = int(time.time())
                rid = f"chatcmpl-{llm.requests}"
                usage = {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
                if step is None:
                    message: dict[str, Any] = {"role": "assistant", "content": final_answer(llm.scenario)}
                    finish = "stop"
                else:
                    name, args = step
                    message = {"role": "assistant", "content": None, "tool_calls": [{
                        "id": f"call_{llm.requests}", "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }]}
                    finish = "tool_calls"
                if not body.get("stream"):
                    self._send(200, {"id": rid, "object": "chat.completion", "created": created, "model": model,
                                     "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                                     "usage": usage})
                    return
                base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}
                delta: dict[str, Any] = {"role": "assistant"}
                if step is None:
                    delta["content"] = message["content"]
                else:
                    call = message["tool_calls"][0]
                    delta["tool_calls"] = [{"index": 0, **call}]
                chunks: list[Any] = [
                    {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                    {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                ]
                if (body.get("stream_options") or {}).get("include_usage"):
                    chunks.append({**base, "choices": [], "usage": usage})
                self._sse(chunks, done=True)

            def _gemini(self, body: dict[str, Any], stream: bool) -> None:
                step = llm.next_step(_gemini_turns_done(body.get("contents") or ()))
                if step is None:
                    parts: list[Any] = [{"text": final_answer(llm.scenario)}]
                else:
                    name, args = step
                    parts = [{"functionCall": {"name": name, "args": args}}]
                reply = {
                    "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP",
                                    "index": 0}],
                    "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 10, "totalTokenCount": 60},
                    "modelVersion": "scripted",
                }
                if stream:
                    self._sse([reply], done=False)
                else:
                    self._send(200, reply)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-llm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
