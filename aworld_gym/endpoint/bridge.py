"""The env's tools as an MCP server an agent program can be given (``AgentContext.mcp_config``).

Agents that take MCP servers rather than Python functions (AWorld's ``Agent(mcp_config=...)``, the OpenAI Agents SDK,
smolagents' ``MCPClient``) get one streamable-HTTP server per :class:`~aworld_gym.endpoint.agents.AgentPolicy`, on
127.0.0.1, in a thread of this process. A request names its episode by the ``X-AWorld-Episode`` header, which the
``mcp_config`` an agent is given carries; the episode id is a random capability (64 bits) that only that agent is
told, and a request naming no open episode is refused. ``tools/list`` gives the episode's env tools, and
``tools/call`` is the agent's ``call_tool``: one turn of the episode, through the env's hub, on the driver's loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from aworld_gym.endpoint.threaded import ThreadedServer

HEADER = "x-aworld-episode"


class ToolBridge:
    """One MCP server for the episodes of an agent policy (see the module).

    ``register(episode, tools, call, loop)`` makes an episode's tools reachable (``call(name, arguments)`` is run on
    ``loop``, the driver's); ``unregister(episode)`` ends that; ``mcp_config(episode)`` is what its agent is given.
    """

    def __init__(self) -> None:
        self._episodes: dict[str, tuple[list[dict[str, Any]], Callable[..., Awaitable[str]], Any]] = {}
        self._lock = threading.Lock()
        self.url: str | None = None
        self._threaded = ThreadedServer("aworld-gym-tool-bridge")

    def register(self, episode: str, tools: list[dict[str, Any]], call: Callable[..., Awaitable[str]],
                 loop: asyncio.AbstractEventLoop) -> None:  # fmt: skip
        if self.url is None:
            self._start()
        with self._lock:
            self._episodes[episode] = (tools, call, loop)

    def unregister(self, episode: str) -> None:
        with self._lock:
            self._episodes.pop(episode, None)

    def mcp_config(self, episode: str) -> dict[str, Any]:
        return {"mcpServers": {"env": {"type": "streamable-http", "url": f"{self.url}/mcp",
                                       "headers": {"X-AWorld-Episode": episode}}}}  # fmt: skip

    def _episode(self, ctx: Any) -> tuple[list[dict[str, Any]], Callable[..., Awaitable[str]], Any]:
        from mcp import MCPError

        request = getattr(ctx, "request", None)
        episode = request.headers.get(HEADER) if request is not None else None
        with self._lock:
            found = self._episodes.get(episode or "")
        if found is None:
            raise MCPError(-32602, "no open episode: send the X-AWorld-Episode header your mcp_config carries")
        return found

    def _build(self) -> Any:
        import mcp_types as types
        from mcp.server import Server

        async def on_list_tools(ctx: Any, params: Any) -> Any:
            tools, _, _ = self._episode(ctx)
            return types.ListToolsResult(tools=[
                types.Tool(name=t["function"]["name"], description=t["function"].get("description"),
                           input_schema=t["function"].get("parameters") or {"type": "object", "properties": {}})
                for t in tools
            ])  # fmt: skip

        async def on_call_tool(ctx: Any, params: Any) -> Any:
            _, call, loop = self._episode(ctx)
            future = asyncio.run_coroutine_threadsafe(call(params.name, dict(params.arguments or {})), loop)
            try:
                text = await asyncio.wrap_future(future)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the episode ended under the call: an error result
                text = f"Error: the episode is over ({type(exc).__name__})"
                return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
            error = text.startswith("Error:")
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)

        return Server("aworld-gym-env", on_list_tools=on_list_tools, on_call_tool=on_call_tool)

    def _start(self) -> None:
        app = self._build().streamable_http_app(stateless_http=True, json_response=True, host="127.0.0.1")
        self.url = self._threaded.start(app, "127.0.0.1", 0, lifespan="on")

    def close(self) -> None:
        self._threaded.stop()
        self.url = None
