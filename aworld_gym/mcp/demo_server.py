"""A small MCP server for examples, tests and benchmarks (stdio, streamable HTTP, or in-process).

Run: ``python -m aworld_gym.mcp.demo_server`` (stdio) or ``... --transport streamable-http --port 8931``.
Tools: ``add``, ``multiply``, ``echo``, ``noop``, ``counter`` (per-session, per-episode state), plus fault
injectors used by the tests (``sleep``, ``crash``, ``big_output``, ``pid``, ``fail``).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from aworld_gym import __version__
from aworld_gym.mcp.hub import META_PREFIX
from aworld_gym.mcp.serving import serve


def session_key(ctx: Context) -> tuple[str, int]:
    """(session, episode) of the calling env, from the ``_meta`` the ToolHub sends with every call."""
    meta: dict[str, Any] = dict(ctx.request_context.meta or {})
    return str(meta.get(f"{META_PREFIX}session", "default")), int(meta.get(f"{META_PREFIX}episode", 0))


def build_server(name: str = "demo") -> MCPServer:
    """A fresh demo server object."""
    server = MCPServer(name, version=__version__, log_level="WARNING")
    counters: dict[tuple[str, int], int] = {}

    @server.tool()
    def add(a: float, b: float) -> float:
        """Add two numbers.

        Args:
            a: the first number.
            b: the second number.
        """
        return a + b

    @server.tool()
    def multiply(a: float, b: float) -> float:
        """Multiply two numbers.

        Args:
            a: the first number.
            b: the second number.
        """
        return a * b

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged.

        Args:
            text: any text.
        """
        return text

    @server.tool()
    async def noop() -> str:
        """Do nothing and return "ok" (used to measure overhead; async, so no worker thread is involved)."""
        return "ok"

    @server.tool()
    def counter(ctx: Context) -> int:
        """Increment and return a counter private to the calling env's current episode."""
        key = session_key(ctx)
        counters[key] = counters.get(key, 0) + 1
        return counters[key]

    @server.tool()
    def sleep(seconds: float) -> str:
        """Sleep, then return (a tool that can hang).

        Args:
            seconds: how long to sleep.
        """
        time.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def crash() -> str:
        """Kill this server process at once (fault injection)."""
        os._exit(3)

    @server.tool()
    def big_output(chars: int) -> str:
        """Return a string of the given length.

        Args:
            chars: length of the output.
        """
        return "x" * chars

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    def fail(message: str) -> str:
        """Raise an error with the message (a tool error).

        Args:
            message: the error text.
        """
        raise ToolError(message)

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transport", default="stdio", choices=["stdio", "streamable-http", "sse"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8931)
    args = parser.parse_args(argv)
    serve(build_server(), args.transport, args.host, args.port)


if __name__ == "__main__":
    main()
