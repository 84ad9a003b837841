"""A small MCP server for examples, tests and benchmarks (stdio, streamable HTTP, or in-process).

Run: ``python -m aworld_gym.mcp.demo_server`` (stdio) or ``... --transport streamable-http --port 8931``.
Tools: ``add``, ``multiply``, ``echo``, ``noop``, ``counter`` (per-session, per-episode state), plus fault
injectors used by the tests (``sleep``, ``crash``, ``big_output``, ``pid``, ``fail``). With ``--images``
(``build_server(images=True)``) also ``picture``: a tiny PNG, JPEG or GIF, as image content or a blob resource.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import BlobResourceContents, EmbeddedResource, ImageContent, TextContent

from aworld_gym.base.version import __version__
from aworld_gym.mcp.hub import META_PREFIX
from aworld_gym.mcp.serving import serve


def session_key(ctx: Context) -> tuple[str, int]:
    """(session, episode) of the calling env, from the ``_meta`` the ToolHub sends with every call."""
    meta: dict[str, Any] = dict(ctx.request_context.meta or {})
    return str(meta.get(f"{META_PREFIX}session", "default")), int(meta.get(f"{META_PREFIX}episode", 0))


# A 2x2 red picture in three formats (base64), for the ``picture`` tool.
PICTURES = {
    "png": "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAFklEQVR4nGM8ISfHwMDAxMDAwMDAAAANBAEIfXHKZgAAAABJRU5ErkJggg==",
    "gif": "R0lGODdhAgACAIEAAMgeHgAAAAAAAAAAACwAAAAAAgACAAAIBgABCAQQEAA7",
    "jpeg": "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDABALDA4MChAODQ4SERATGCgaGBYWGDEjJR0oOjM9PDkzODdASFxOQERXRTc4UG1RV19iZ2hn"
    "Pk1xeXBkeFxlZ2P/2wBDARESEhgVGC8aGi9jQjhCY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2P/"
    "wAARCAACAAIDASIAAhEBAxEB/8QAFQABAQAAAAAAAAAAAAAAAAAAAAX/xAAUEAEAAAAAAAAAAAAAAAAAAAAA/8QAFQEBAQAAAAAAAAAAAAAA"
    "AAAABAb/xAAUEQEAAAAAAAAAAAAAAAAAAAAA/9oADAMBAAIRAxEAPwCOACqH/9k=",
}


def build_server(name: str = "demo", images: bool = False) -> MCPServer:
    """A fresh demo server object (``images``: with the ``picture`` tool)."""
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

    if images:
        _add_picture(server)
    return server


def _add_picture(server: MCPServer) -> None:
    @server.tool(structured_output=False)
    def picture(format: str = "png", as_resource: bool = False) -> list[TextContent | ImageContent | EmbeddedResource]:
        """A tiny picture: a 2x2 red square.

        Args:
            format: "png", "jpeg" or "gif".
            as_resource: send it as an embedded blob resource (demo://picture.<format>) instead of image content.
        """
        if format not in PICTURES:
            raise ToolError(f"format must be one of {sorted(PICTURES)}, not {format!r}")
        mime = f"image/{format}"
        if as_resource:
            blob = BlobResourceContents(uri=f"demo://picture.{format}", mime_type=mime, blob=PICTURES[format])
            content: TextContent | ImageContent | EmbeddedResource = EmbeddedResource(type="resource", resource=blob)
        else:
            content = ImageContent(type="image", data=PICTURES[format], mime_type=mime)
        return [TextContent(type="text", text=f"A 2x2 red square ({format}):"), content]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transport", default="stdio", choices=["stdio", "streamable-http", "sse"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8931)
    parser.add_argument("--images", action="store_true", help="add the picture tool (images in tool results)")
    args = parser.parse_args(argv)
    serve(build_server(images=args.images), args.transport, args.host, args.port)


if __name__ == "__main__":
    main()
