"""The HTTP client of an MCP server sized for many calls in flight (issue 48): no cap by default (httpx's own, 100,
capped a shared session's calls silently), ``max_connections`` where a server wants one, said once when exceeded."""

from __future__ import annotations

import asyncio
import sys
import warnings

import pytest

from aworld_gym.base.capacity import CapacityWarning
from aworld_gym.base.errors import ConfigError
from aworld_gym.mcp.config import ServerSpec, parse_mcp_config
from aworld_gym.mcp.demo_server import build_server
from aworld_gym.mcp.transports.connection import Connection
from aworld_gym.mcp.transports.pool import ConnectionPool


def _limits(spec: ServerSpec) -> tuple[int | None, int | None]:
    async def built() -> tuple[int | None, int | None]:
        _, (http,) = Connection(spec)._transport()
        try:
            pool = http._transport._pool
            return pool._max_connections, pool._max_keepalive_connections
        finally:
            await http.aclose()

    return asyncio.run(built())


@pytest.mark.parametrize("kind", ["streamable-http", "sse"])
def test_an_http_servers_connections_are_uncapped_by_default_and_capped_by_max_connections(kind):
    (spec,) = parse_mcp_config({"mcpServers": {"s": {"type": kind, "url": "http://127.0.0.1:9/mcp"}}})
    assert spec.max_connections is None
    if kind == "streamable-http":  # the sse client is made inside the SDK's transport, from our factory
        assert _limits(spec) == (sys.maxsize, sys.maxsize)  # httpcore's spelling of no limit
    (spec,) = parse_mcp_config(
        {"mcpServers": {"s": {"type": kind, "url": "http://127.0.0.1:9/mcp", "max_connections": 500}}}
    )
    assert spec.max_connections == 500
    if kind == "streamable-http":
        assert _limits(spec) == (500, 500)


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ({"type": "streamable-http", "url": "http://h/mcp", "max_connections": 0}, "integer >= 1"),
        ({"type": "streamable-http", "url": "http://h/mcp", "max_connections": True}, "integer >= 1"),
        ({"command": "python", "max_connections": 10}, "for HTTP servers (this one is stdio)"),
    ],
)
def test_a_bad_max_connections_says_what_to_change(entry, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        parse_mcp_config({"mcpServers": {"s": entry}})


def test_more_envs_sharing_a_session_than_its_max_connections_is_said_once():
    spec = ServerSpec(name="demo", type="inprocess", server=build_server(), share_session=True, max_connections=2)
    pool = ConnectionPool()

    async def four_hubs() -> int:
        conns = [await pool.acquire(spec) for _ in range(4)]
        for conn in conns:
            await pool.release(conn)
        return len({id(c) for c in conns})

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        assert asyncio.run(four_hubs()) == 1  # one shared session
    said = [str(w.message) for w in seen if issubclass(w.category, CapacityWarning)]
    assert len(said) == 1 and "max_connections=2" in said[0] and "'demo'" in said[0]
