"""The stand-in for a server in ``replay-strict``: an in-process MCP server made from the store, never the real one.

It lists the tools the real server listed when its calls were recorded, and answers a call with the result kept under
the key the hub put in the call's ``_meta`` (:data:`~aworld_gym.mcp.cache.KEY_META`); a call without a kept result
gets the JSON-RPC error :data:`~aworld_gym.mcp.cache.CACHE_MISS_CODE`, which the hub turns into kind ``cache_miss``.
The hub calls no reset tool of a strict server: the real server's state is not there to reset.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from aworld_gym.mcp.cache.store import CacheError, ToolStore


def replay_server(store: ToolStore, ident: str, counts: Counter[str]) -> Any:
    """The replay server of the server kept as ``ident`` in ``store``."""
    import mcp_types as types
    from mcp import MCPError
    from mcp.server import Server

    from aworld_gym.mcp.cache import CACHE_MISS_CODE, KEY_META

    listed = store.listing(ident)
    if listed is None:
        raise CacheError(f"the tool cache at {store.where} holds no tools listed by server {ident!r}: record a run "
                         "with its mode 'record' or 'replay' first")  # fmt: skip
    tools_json, info = listed
    tools = [types.Tool.model_validate(t) for t in tools_json]

    async def on_list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=tools)

    async def on_call_tool(ctx: Any, params: Any) -> Any:
        meta = params.meta
        if meta is not None and not isinstance(meta, dict):
            meta = meta.model_dump(by_alias=True)
        key = (meta or {}).get(KEY_META)
        if key is None:
            counts["misses"] += 1
            raise MCPError(CACHE_MISS_CODE, f"replay-strict: the call of {params.name!r} on {ident!r} cannot be "
                                            "looked up (an episode without a seed, or arguments that are not JSON)")  # fmt: skip
        try:
            found = await asyncio.to_thread(store.get, key)
        except CacheError as exc:
            counts["errors"] += 1
            raise MCPError(CACHE_MISS_CODE, f"replay-strict: {exc}") from exc
        if found is None:
            counts["misses"] += 1
            raise MCPError(CACHE_MISS_CODE, f"replay-strict: no result of this call of {params.name!r} on {ident!r} "
                                            f"was recorded (key {key[:12]})")  # fmt: skip
        counts["hits"] += 1
        return types.CallToolResult.model_validate(found.result)

    info = info or {}
    return Server(str(info.get("name") or ident), version=str(info.get("version") or ""),
                  on_list_tools=on_list_tools, on_call_tool=on_call_tool)  # fmt: skip
