"""What every set-up's ``agent.py`` shares (standard library only, so it runs in every
framework's virtualenv): the two tools, the model's script for each scenario, and a fake
OpenAI-compatible chat-completions server on 127.0.0.1 that plays that script.

Scenarios (the same in every framework):

- ``loop``: the model calls ``lookup_order(order_id="A-17")`` eight times; the tool returns
  the same record every time;
- ``empty_search``: the model calls ``search_docs`` eight times, rephrasing the query about
  refunds each time; the index has nothing about refunds, so every result is empty;
- ``healthy``: six calls (orders and searches) that each return something new, then the
  answer.

The model's side of the loop (issue 29; :data:`MODEL_SCENARIOS`, run only by the set-ups
whose ``setups.toml`` lists them, since each needs a framework mechanism that sends the
model back): a script of model moves (:func:`model_script`, :func:`model_move`), each a
text, a reasoning, and/or a tool request, counted by the model responses already in the
conversation:

- ``text_loop``: the same text-only answer (no tool call) :data:`MODEL_LOOP_TURNS` times,
  each rejected by the agent's own check and sent back, then an accepted answer;
  ``text_healthy``: two different rejected answers, then the accepted one;
- ``reasoning_loop``: the same reasoning with no text and no tool call, again and again
  (the framework asks again), then the answer; ``reasoning_healthy``: different reasoning
  each time, then the answer;
- ``unknown_tool``: a request of :data:`UNKNOWN_TOOL` (no such tool) again and again, the
  framework feeding back an error each time, then the answer; ``unknown_tool_healthy``:
  the wrong name once, then ``lookup_order``, then the answer;
- ``refused_tool``: a request of :data:`REFUSED_TOOL` (a tool that needs the user's approval),
  refused by the user every time (:data:`REFUSAL`), again and again, then the answer;
  ``refused_tool_healthy``: refused once, then ``lookup_order``, then the answer.

An ``agent.py`` imports this with ``sys.path.insert(0, <this directory>)``; a framework that
has its own test model (pydantic-ai's ``FunctionModel``, LangChain's fake chat models)
plays :func:`script` through it, the others point their OpenAI client at
:class:`FakeOpenAI`.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

SCENARIOS = ("loop", "empty_search", "healthy")
MODEL_SCENARIOS = ("text_loop", "text_healthy", "reasoning_loop", "reasoning_healthy", "unknown_tool",
                   "unknown_tool_healthy", "refused_tool", "refused_tool_healthy")
ALL_SCENARIOS = SCENARIOS + MODEL_SCENARIOS
MODEL_LOOP_TURNS = 6
LOOP_TURNS = 8
HEALTHY_TURNS = 6

ORDERS = {
    "A-17": {"order_id": "A-17", "items": 2, "shipped_to": "Berlin", "carrier": "DHL"},
    "A-18": {"order_id": "A-18", "items": 1, "shipped_to": "Lyon", "carrier": "UPS"},
    "A-19": {"order_id": "A-19", "items": 5, "shipped_to": "Turin", "carrier": "GLS"},
}
DOCS = {
    "shipping": ["Orders ship within 2 business days.", "Express shipping costs 9 EUR."],
    "warranty": ["Every device has a 2-year warranty."],
    "returns": ["Unused items can be sent back within 30 days."],
}
EMPTY_QUERIES = [
    "refund policy", "refund policy for orders", "how do I get a refund", "money back policy",
    "refunds", "refund rules for damaged items", "reimbursement policy", "get my money back",
    "refund terms", "can I return for a refund", "refund conditions", "refund eligibility",
]
FINAL = {
    "loop": "Order A-17 has 2 items shipped to Berlin.",
    "empty_search": "I could not find the refund policy.",
    "healthy": "Orders ship in 2 days, devices have a 2-year warranty, and A-17, A-18, A-19 are shipped.",
}


def lookup_order(order_id: str) -> str:
    """Look up an order by its id and return its record as JSON."""
    order = ORDERS.get(order_id)
    return json.dumps(order if order else {"error": f"no order {order_id}"})


def search_docs(query: str) -> str:
    """Search the help-centre documents; returns the matching passages as JSON."""
    words = set(query.lower().replace("?", "").split())
    hits = [text for topic, texts in DOCS.items() if topic in words for text in texts]
    return json.dumps({"results": hits, "total": len(hits)})


TOOLS: dict[str, Callable[..., str]] = {"lookup_order": lookup_order, "search_docs": search_docs}
TOOL_SCHEMAS = [
    {"type": "function", "function": {
        "name": "lookup_order", "description": lookup_order.__doc__,
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                       "required": ["order_id"]}}},
    {"type": "function", "function": {
        "name": "search_docs", "description": search_docs.__doc__,
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
]

_HEALTHY = [
    ("search_docs", {"query": "shipping times"}),
    ("lookup_order", {"order_id": "A-17"}),
    ("search_docs", {"query": "warranty length"}),
    ("lookup_order", {"order_id": "A-18"}),
    ("search_docs", {"query": "returns window"}),
    ("lookup_order", {"order_id": "A-19"}),
]


def script(scenario: str, turns: int = LOOP_TURNS) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls the model makes in ``scenario``, in order (then it answers);
    ``turns`` (at most ``len(EMPTY_QUERIES)``) lengthens the two looping scenarios."""
    turns = min(turns, len(EMPTY_QUERIES))
    if scenario == "loop":
        return [("lookup_order", {"order_id": "A-17"})] * turns
    if scenario == "empty_search":
        return [("search_docs", {"query": q}) for q in EMPTY_QUERIES[:turns]]
    if scenario == "healthy":
        return list(_HEALTHY[:HEALTHY_TURNS])
    raise SystemExit(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")


def next_step(scenario: str, done: int) -> tuple[str, dict[str, Any]] | str:
    """The model's move after ``done`` tool results: a tool call, or the final answer."""
    steps = script(scenario)
    return steps[done] if done < len(steps) else FINAL[scenario]


def scenario_from_argv(argv: list[str] | None = None) -> str:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in SCENARIOS:
        raise SystemExit(f"usage: python agent.py {{{','.join(SCENARIOS)}}} [options]")
    return argv[0]


# --- the model's side of the loop (issue 29) ----------------------------------------------

#: The tool name the model requests in ``unknown_tool``: no agent has it.
UNKNOWN_TOOL = "get_order_status"
#: The text-only answer ``text_loop`` repeats: it names no order, so the agent's check
#: (:func:`answer_accepted`) rejects it.
LOOP_TEXT = "I am looking into your order now and will get back to you shortly."
#: What the agent tells the model when it rejects an answer (``ModelRetry`` and the like).
REJECTION = "The answer must name the order id (like A-17) and where it was shipped."
#: The tool the model requests in ``refused_tool``: it needs the user's approval, which is
#: refused with :data:`REFUSAL` every time.
REFUSED_TOOL = "cancel_order"
REFUSAL = "The user refused: do not cancel order A-17."
LOOP_REASONING = "The user wants the order status. I should look the order up before answering."
MODEL_FINAL = "Order A-17 has 2 items shipped to Berlin."


def cancel_order(order_id: str) -> str:
    """Cancel an order (needs the user's approval)."""
    return json.dumps({"order_id": order_id, "cancelled": True})


def answer_accepted(text: str) -> bool:
    """The agent's own check of a text answer in the ``text_*`` scenarios."""
    return "A-17" in text and "Berlin" in text


def model_script(scenario: str, turns: int = MODEL_LOOP_TURNS) -> list[dict[str, Any]]:
    """The model's moves in ``scenario`` (one of :data:`MODEL_SCENARIOS`), in order, the last
    being the final answer. A move is a dict with ``text`` (str or None), ``reasoning`` (str
    or None) and ``tool`` (``(name, args)`` or None)."""

    def move(text: str | None = None, reasoning: str | None = None,
             tool: tuple[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        return {"text": text, "reasoning": reasoning, "tool": tool}

    final = move(MODEL_FINAL)
    if scenario == "text_loop":
        return [move(LOOP_TEXT) for _ in range(turns)] + [final]
    if scenario == "text_healthy":
        return [move("Let me check that order for you."),
                move("Your order A-17 exists; I am checking where it went."), final]
    if scenario == "reasoning_loop":
        return [move(reasoning=LOOP_REASONING) for _ in range(turns)] + [final]
    if scenario == "reasoning_healthy":
        return [move(reasoning="The user asks about an order."),
                move(reasoning="Order A-17 is the one in the question; it shipped with DHL to Berlin."), final]
    if scenario == "unknown_tool":
        return [move(tool=(UNKNOWN_TOOL, {"order_id": "A-17"})) for _ in range(turns)] + [final]
    if scenario == "refused_tool":
        return [move(tool=(REFUSED_TOOL, {"order_id": "A-17"})) for _ in range(turns)] + [final]
    if scenario == "refused_tool_healthy":
        return [move(tool=(REFUSED_TOOL, {"order_id": "A-17"})), move(tool=("lookup_order", {"order_id": "A-17"})),
                final]
    if scenario == "unknown_tool_healthy":
        return [move(tool=(UNKNOWN_TOOL, {"order_id": "A-17"})), move(tool=("lookup_order", {"order_id": "A-17"})),
                final]
    raise SystemExit(f"unknown scenario {scenario!r}; choose from {', '.join(MODEL_SCENARIOS)}")


def model_move(scenario: str, responses: int) -> dict[str, Any]:
    """The model's move after ``responses`` model responses in the conversation (the final
    answer once the script is played)."""
    moves = model_script(scenario)
    return moves[min(responses, len(moves) - 1)]


# --- the fake model servers --------------------------------------------------------------

_S = TypeVar("_S", bound="LocalServer")


class LocalServer:
    """A threaded HTTP server on 127.0.0.1 (an ephemeral port, :attr:`root`) answering with
    the handler class :meth:`_handler` returns; a context manager. ``requests`` counts the
    replies (a subclass adds to it)."""

    def __init__(self) -> None:
        self.requests = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self: _S) -> _S:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError


def send_json(handler: BaseHTTPRequestHandler, code: int, payload: Any) -> None:
    """Answer ``payload`` as JSON with a ``Content-Length``."""
    data = json.dumps(payload).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class JSONHandler(BaseHTTPRequestHandler):
    """What the fake servers' request handlers share: no request log, JSON request bodies,
    and a 404 in the model APIs' error shape."""

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def json_body(self) -> Any:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")

    def not_found(self, path: str) -> None:
        send_json(self, 404, {"error": {"message": f"fake server: no {path}"}})


def _tool_results_in(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if m.get("role") in ("tool", "function"))


class FakeOpenAI(LocalServer):
    """A chat-completions server on 127.0.0.1 (``base_url``) that plays ``scenario``.

    Each request is answered from the number of tool results in its messages (so retries
    and parallel agents stay consistent), with one tool call or the final answer; streamed
    (``"stream": true``) or not. ``react=True`` answers in the ReAct text format
    (``Thought/Action/Action Input`` and ``Answer``), counting ``Observation`` lines.
    ``step_of`` replaces the way the step is read from the messages. ``answer_key`` sends
    a model scenario's text as the JSON object ``{answer_key: text}`` (a structured output).
    """

    def __init__(self, scenario: str, *, react: bool = False,
                 step_of: Callable[[list[dict[str, Any]]], int] | None = None, answer_key: str = "") -> None:
        self.scenario = scenario
        self.answer_key = answer_key
        self.react = react
        self.step_of = step_of or (_observations_in if react else _tool_results_in)
        super().__init__()

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        """The assistant message for one request body. In issue 29's scenarios
        (:data:`MODEL_SCENARIOS`) the move is the request's rank (a reasoning-only turn need
        not come back as an assistant message), ``reasoning_content`` carrying the reasoning
        (as DeepSeek and vLLM send it)."""
        self.requests += 1
        if self.scenario in MODEL_SCENARIOS:
            move = model_move(self.scenario, self.requests - 1)
            text = move["text"]
            if text is not None and self.answer_key:
                text = json.dumps({self.answer_key: text})
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if move["reasoning"]:
                message["reasoning_content"] = move["reasoning"]
            if move["tool"]:
                name, args = move["tool"]
                message["tool_calls"] = [{"id": f"call_{self.requests}", "type": "function",
                                          "function": {"name": name, "arguments": json.dumps(args)}}]
            return message
        step = next_step(self.scenario, self.step_of(body.get("messages") or []))
        if isinstance(step, str):
            text = f"Thought: I can answer without using any more tools.\nAnswer: {step}" if self.react else step
            return {"role": "assistant", "content": text}
        name, args = step
        if self.react:
            text = f"Thought: I need to use a tool.\nAction: {name}\nAction Input: {json.dumps(args)}"
            return {"role": "assistant", "content": text}
        call = {"id": f"call_{self.requests}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(JSONHandler):
            def do_POST(self) -> None:
                body = self.json_body()
                if not self.path.endswith("/chat/completions"):
                    self.not_found(self.path)
                    return
                message = fake.reply(body)
                model = body.get("model", "fake-model")
                usage = {"prompt_tokens": 120, "completion_tokens": 20, "total_tokens": 140}
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                if body.get("stream"):
                    self._stream(model, message, finish, usage)
                    return
                send_json(self, 200, {"id": f"chatcmpl-{fake.requests}", "object": "chat.completion",
                                 "created": int(time.time()), "model": model,
                                 "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                                 "usage": usage})

            def _stream(self, model: str, message: dict[str, Any], finish: str, usage: dict[str, int]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                base = {"id": f"chatcmpl-{fake.requests}", "object": "chat.completion.chunk",
                        "created": int(time.time()), "model": model}
                delta: dict[str, Any] = {"role": "assistant"}
                if message.get("reasoning_content"):
                    delta["reasoning_content"] = message["reasoning_content"]
                if message.get("tool_calls"):
                    delta["tool_calls"] = [{"index": 0, **c} for c in message["tool_calls"]]
                else:
                    delta["content"] = message["content"]
                for chunk in (
                    {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                    {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                    {**base, "choices": [], "usage": usage},
                ):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        return Handler


def _observations_in(messages: list[dict[str, Any]]) -> int:
    # the system prompt's format instructions show "Observation:" too: not a tool result
    text = "\n".join(m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
                     for m in messages if m.get("role") != "system")
    return text.count("Observation:")


def iter_script(scenario: str) -> Iterator[tuple[str, dict[str, Any]] | str]:
    """The model's moves in order, ending with the answer."""
    yield from script(scenario)
    yield FINAL[scenario]
