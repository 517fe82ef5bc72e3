"""The MCP server of the MCP set-ups: the two tools on the SDK's high-level server over stdio
(``FastMCP`` in mcp 1.x, renamed ``MCPServer`` in mcp 2.x)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_common"))

import scripted

try:
    from mcp.server.mcpserver import MCPServer as Server  # mcp 2.x
except ImportError:
    from mcp.server.fastmcp import FastMCP as Server  # mcp 1.x

server = Server("support-tools")


@server.tool()
def lookup_order(order_id: str) -> str:
    """Look up an order by its id and return its record as JSON."""
    return scripted.lookup_order(order_id)


@server.tool()
def search_docs(query: str) -> str:
    """Search the help-centre documents; returns the matching passages as JSON."""
    return scripted.search_docs(query)


if __name__ == "__main__":
    server.run("stdio")
