"""A stand-in for AWorld's hosted tool gateway (streamable HTTP): it checks the headers AWorld's gateway wants
(``Authorization: Bearer <token>``, ``ENV_CODE: gaia``, ``MCP_SERVERS`` naming servers it has) and answers 401
with a reason otherwise; it serves tools under AWorld-style names, one of them (``read_file``) clashing with ours.

    python -m tests.gateway_server --port 8990 --token secret
"""

from __future__ import annotations

import argparse
from typing import Any

SERVERS = {"readweb-server": ["read_url"], "wiki-server": ["search_wikipedia"], "document-server": ["read_file"]}


def build() -> Any:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("aworld-gateway", log_level="WARNING")

    @server.tool()
    def read_url(url: str) -> str:
        """Read a web page and return its text (AWorld's readweb-server)."""
        return f"gateway page text of {url}"

    @server.tool()
    def search_wikipedia(query: str) -> str:
        """Search Wikipedia (AWorld's wiki-server)."""
        return f"gateway wikipedia results for {query!r}: Mount Everest is 8849 m high"

    @server.tool()
    def read_file(path: str) -> str:
        """Read a document (AWorld's document-server)."""
        return f"gateway read {path}"

    return server


class Check:
    """ASGI middleware: the gateway's headers, or 401 with the reason."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            h = {k.decode().lower(): v.decode() for k, v in scope.get("headers") or []}
            servers = [s for s in h.get("mcp_servers", "").split(",") if s]
            why = None
            if h.get("authorization") != f"Bearer {self.token}":
                why = "bad token"
            elif h.get("env_code") != "gaia":
                why = "ENV_CODE must be gaia"
            elif not servers or set(servers) - set(SERVERS):
                why = f"MCP_SERVERS must name servers of {sorted(SERVERS)}"
            if why:
                await send(
                    {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]}
                )
                await send({"type": "http.response.body", "body": why.encode()})
                return
        await self.app(scope, receive, send)


def main() -> None:
    import uvicorn

    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--token", required=True)
    args = ap.parse_args()
    uvicorn.run(Check(build().streamable_http_app(host="127.0.0.1"), args.token), host="127.0.0.1", port=args.port,
                log_level="warning")  # fmt: skip


if __name__ == "__main__":
    main()
