"""MCP: the Python SDK's ``ClientSession`` over ``stdio_client`` to ``server.py`` (the SDK's
FastMCP/MCPServer). A scripted client plays the scenario: it calls the tools the model
would call, in order, and prints the answer. There is no agent framework and so no agent
span: the calls of one client session are one run.

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=scripted.SCENARIOS)
    parser.add_argument("--turns", type=int, default=scripted.LOOP_TURNS, help="calls in the looping scenarios")
    args = parser.parse_args()
    print("final answer:", asyncio.run(run(args.scenario, args.turns)))


if __name__ == "__main__":
    main()
