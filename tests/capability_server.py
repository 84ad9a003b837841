"""A real MCP server whose tools ask the client for things: input (elicitation), a model's completion (sampling), its
roots, and who it is (clientInfo). Over stdio or streamable HTTP; ``--legacy`` makes it a 2025-era server (it does not
know ``server/discover``), whose tools then ask mid-call with server-to-client requests (and some swallow a refusal,
as many servers do); otherwise the 2026-07-28 client gets them as input requests of the call's result. Over HTTP it
counts the JSON-RPC methods it received (``GET /stats``).

    python -m tests.capability_server [--transport streamable-http --port 8990] [--legacy]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    Elicit,
    ElicitationResult,
    ListRoots,
    MCPServer,
    Resolve,
    Sample,
)
from mcp_types import CreateMessageResult, ListRootsResult, SamplingMessage, TextContent
from pydantic import BaseModel, Field

CODE_SCHEMA = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}


class Booking(BaseModel):
    name: str = Field(default="Ada", description="who books")
    guests: int = Field(default=2, description="how many guests")


class DoorCode(BaseModel):
    code: str = Field(description="the door code (no default)")


def ask_booking() -> Elicit[Booking]:
    return Elicit("Who is booking, and for how many guests?", Booking)


def ask_code() -> Elicit[DoorCode]:
    return Elicit("Enter the door code", DoorCode)


def ask_model(text: str) -> Sample:
    prompt = SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarize: {text}"))
    return Sample([prompt], max_tokens=64, system_prompt="Be brief.")


def ask_roots() -> ListRoots:
    return ListRoots()


def build() -> MCPServer:
    server = MCPServer("capabilities", version="1.0.0", log_level="WARNING")

    @server.tool()
    def book_table(city: str, answer: Annotated[ElicitationResult[Booking], Resolve(ask_booking)]) -> str:
        """Book a table in a city (asks the user who books and for how many)."""
        if isinstance(answer, AcceptedElicitation):
            return f"booked in {city} for {answer.data.name}, {answer.data.guests} guests"
        return f"no booking in {city}"  # a success that hides that the user was not asked (many servers do this)

    @server.tool()
    def open_door(answer: Annotated[ElicitationResult[DoorCode], Resolve(ask_code)]) -> str:
        """Open the door (asks the user for the code, which has no default)."""
        return f"opened with {answer.data.code}" if isinstance(answer, AcceptedElicitation) else "the door stays shut"

    @server.tool()
    def summarize(text: str, reply: Annotated[CreateMessageResult, Resolve(ask_model)]) -> str:
        """Summarize a text with the client's language model (sampling)."""
        content = reply.content
        return f"summary: {getattr(content, 'text', content)} (model {reply.model})"

    @server.tool()
    def my_roots(result: Annotated[ListRootsResult, Resolve(ask_roots)]) -> str:
        """List the client's roots."""
        return "\n".join(str(r.uri) for r in result.roots) or "(no roots)"

    @server.tool()
    def whoami(ctx: Context) -> str:
        """The client's name and version, as the server saw them."""
        params = ctx.session.client_params
        info = params.client_info if params is not None else None
        return f"{info.name} {info.version}" if info is not None else "unknown client"

    @server.tool()
    async def wait(seconds: float) -> str:
        """Wait, then answer (to overlap with another call)."""
        await asyncio.sleep(seconds)
        return f"waited {seconds}"

    @server.tool()
    async def ask_plain(ctx: Context, seconds: float = 0.0) -> str:
        """2025-era servers only: ask for a code mid-call, after a wait, and swallow any refusal."""
        await asyncio.sleep(seconds)
        try:
            result = await ctx.session.elicit_form("Enter the code", CODE_SCHEMA, related_request_id=ctx.request_id)
        except Exception as exc:  # noqa: BLE001 - what many servers do: the refusal becomes a success
            return f"could not ask: {exc}"
        return f"the user chose {result.action}"

    @server.tool()
    async def open_page(ctx: Context) -> str:
        """2025-era servers only: ask the user to open a web page (URL-mode elicitation)."""
        result = await ctx.elicit_url("Sign in to continue", "https://example.com/login?state=s3cret", "e1")
        return f"the user chose {result.action}"

    return server


class Counting:
    """ASGI middleware: counts the JSON-RPC methods of POSTs (``GET /stats`` returns the counts); ``legacy``: answers
    a request of the 2026-07-28 protocol with 400, as a 2025-era server does."""

    def __init__(self, app: Any, legacy: bool = False) -> None:
        self.app, self.legacy = app, legacy
        self.methods: Counter[str] = Counter()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/stats":
            body = json.dumps(self.methods).encode()
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": body})
            return
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:  # read the whole request, count its methods, then hand the app the same request
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False) and message["type"] == "http.request"
        self._count(body)
        version = dict(scope.get("headers") or []).get(b"mcp-protocol-version", b"")
        if self.legacy and version.startswith(b"2026"):
            await send({"type": "http.response.start", "status": 400, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"Bad Request: Unsupported protocol version"})
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _count(self, body: bytes) -> None:
        try:
            data = json.loads(body)
        except ValueError:
            return
        for message in data if isinstance(data, list) else [data]:
            if isinstance(message, dict) and "method" in message:
                self.methods[message["method"]] += 1


async def legacy_stdio(server: MCPServer) -> None:
    """Serve stdio as a 2025-era server: ``server/discover`` gets "Method not found" before the SDK's server sees it
    (which would otherwise commit the connection to the 2026-07-28 protocol)."""
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage
    from mcp_types import ErrorData, JSONRPCError, JSONRPCRequest

    async with stdio_server() as (read, write):
        forward, received = anyio.create_memory_object_stream[Any](0)

        async def pump() -> None:
            async with forward:
                async for item in read:
                    message = getattr(item, "message", None)
                    if isinstance(message, JSONRPCRequest) and message.method == "server/discover":
                        error = ErrorData(code=-32601, message="Method not found")
                        await write.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=message.id, error=error)))
                        continue
                    await forward.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            lowlevel = server._lowlevel_server
            await lowlevel.run(received, write, lowlevel.create_initialization_options())
            tg.cancel_scope.cancel()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--transport", default="stdio", choices=["stdio", "streamable-http"])
    ap.add_argument("--port", type=int, default=8990)
    ap.add_argument("--legacy", action="store_true", help="a 2025-era server: no server/discover")
    args = ap.parse_args()
    server = build()
    if args.transport == "stdio":
        anyio.run(legacy_stdio if args.legacy else server.run_stdio_async, *([server] if args.legacy else []))
        return
    import uvicorn

    app = Counting(server.streamable_http_app(host="127.0.0.1"), legacy=args.legacy)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
