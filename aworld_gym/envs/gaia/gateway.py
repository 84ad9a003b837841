"""AWorld's hosted tool gateway as an ``mcp_config`` entry.

AWorld's GAIA agent reaches its tool servers (web reading, a browser, documents, code, media, Wikipedia, Wayback,
arXiv, search, a terminal) through one streamable-HTTP gateway that wants ``Authorization: Bearer <token>``,
``ENV_CODE`` (the benchmark) and, to pick servers, ``MCP_SERVERS`` (comma-separated names), with 600 s timeouts.
:func:`aworld_gateway` writes that entry; pass it as ``mcp_config`` to ``AWorld/GAIA-v0`` (its tools join ours as
``aworld__<tool>``, ours keep their names) and choose tools with ``allow_tools`` / ``deny_tools``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from aworld_gym.base.errors import ConfigError

TOKEN_ENV = "AWORLD_GATEWAY_TOKEN"
URL_ENV = "AWORLD_GATEWAY_URL"


def aworld_gateway(
    url: str | None = None,
    token: str | None = None,
    servers: Sequence[str] = (),
    env_code: str = "gaia",
    name: str = "aworld",
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """``{"mcpServers": {name: <the gateway entry>}}`` in AWorld's format.

    Args:
        url: the gateway's streamable-HTTP URL (default ``$AWORLD_GATEWAY_URL``).
        token: its bearer token (default ``$AWORLD_GATEWAY_TOKEN``).
        servers: the gateway's servers to use (sent as ``MCP_SERVERS``; empty: the gateway's default set).
        env_code: ``ENV_CODE`` (the benchmark, ``"gaia"``).
        name: the entry's name and the prefix of its tools (``<name>__<tool>``).
        timeout_s: per-call timeout and SSE read timeout (AWorld uses 600 s).

    Raises:
        ConfigError: no URL or no token, given or in the environment.
    """
    url = url or os.environ.get(URL_ENV)
    token = token or os.environ.get(TOKEN_ENV)
    if not url or not token:
        raise ConfigError(
            f"AWorld's gateway needs a URL and a token: pass url= and token=, or set {URL_ENV} and {TOKEN_ENV}"
        )
    headers = {"Authorization": f"Bearer {token}", "ENV_CODE": env_code}
    if servers:
        headers["MCP_SERVERS"] = ",".join(servers)
    entry = {"type": "streamable-http", "url": url, "headers": headers, "timeout": timeout_s,
             "sse_read_timeout": timeout_s, "tool_prefix": name}  # fmt: skip
    return {"mcpServers": {name: entry}}
