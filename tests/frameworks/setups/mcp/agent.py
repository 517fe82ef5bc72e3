"""MCP: the Python SDK's ``ClientSession`` over ``stdio_client`` to ``server.py`` (the SDK's
FastMCP/MCPServer). A scripted client plays the scenario: it calls the tools the model
would call, in order, and prints the answer. There is no agent framework and so no agent
span: the calls of one conversation are one run when they name it. ``--conversation
NAME`` names it the way docs/runs.md tells an application to: ``gen_ai.conversation.id``
in the baggage, copied onto every span by OpenTelemetry's ``BaggageSpanProcessor``.

The server is started by the SDK with its default environment (no ``OTEL_*`` variables,
no ``PYTHONPATH``), so it is not instrumented and its stdout stays the protocol channel.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_common"))

import scripted
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

SERVER = Path(__file__).resolve().parent / "server.py"


def _text(result: object) -> str:
    return "".join(getattr(c, "text", "") for c in getattr(result, "content", []) or [])


async def run(scenario: str, turns: int) -> str:
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        assert tools == set(scripted.TOOLS), tools
        for name, arguments in scripted.script(scenario, turns):
            result = await session.call_tool(name, arguments)
            if getattr(result, "is_error", False) or getattr(result, "isError", False):
                raise SystemExit(f"tool {name} failed: {_text(result)}")
    return scripted.FINAL[scenario]


def name_conversation(name: str) -> None:
    """Put ``gen_ai.conversation.id`` in the baggage and have every span carry it."""
    from opentelemetry import baggage, context, trace
    from opentelemetry.processor.baggage import ALLOW_ALL_BAGGAGE_KEYS, BaggageSpanProcessor

    provider = trace.get_tracer_provider()
    provider.add_span_processor(BaggageSpanProcessor(ALLOW_ALL_BAGGAGE_KEYS))  # type: ignore[attr-defined]
    context.attach(baggage.set_baggage("gen_ai.conversation.id", name))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=scripted.SCENARIOS)
    parser.add_argument("--turns", type=int, default=scripted.LOOP_TURNS, help="calls in the looping scenarios")
    parser.add_argument("--conversation", help="name the conversation (gen_ai.conversation.id, through baggage)")
    args = parser.parse_args()
    if args.conversation:
        name_conversation(args.conversation)
    print("final answer:", asyncio.run(run(args.scenario, args.turns)))


if __name__ == "__main__":
    main()
