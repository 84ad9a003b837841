"""Serve our own MCP server objects on a transport."""

from __future__ import annotations

from typing import Any


def serve(server: Any, transport: str, host: str = "127.0.0.1", port: int = 8931) -> None:
    """Run an ``MCPServer`` on ``stdio``, ``streamable-http`` or ``sse`` (blocks until stopped)."""
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run(transport, host=host, port=port)
