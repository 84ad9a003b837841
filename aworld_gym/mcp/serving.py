"""Serve our own MCP server objects on a transport, optionally behind a bearer token."""

from __future__ import annotations

import hmac
import os
import signal
from typing import Any

TOKEN_ENV = "AWORLD_GYM_SERVER_TOKEN"


def exit_on_sigterm() -> None:
    """Make SIGTERM remove this process's temp folders (:mod:`aworld_gym.base.scratch`) before it ends.

    It ends at once (``os._exit``): a ``SystemExit`` would wait for the MCP SDK's stdin reader thread, which nothing
    can cancel, and for any tool call's worker thread, so a server whose stdin was still open would hang."""
    signal.signal(signal.SIGTERM, _exit_on_signal)


def _exit_on_signal(signum: int, frame: Any) -> None:
    from aworld_gym.base import scratch

    try:
        scratch.remove_own()
    finally:
        os._exit(128 + signum)


class BearerAuth:
    """ASGI middleware: HTTP requests must carry ``Authorization: Bearer <token>`` (else 401)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                await send(
                    {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]}
                )
                await send({"type": "http.response.body", "body": b"missing or wrong bearer token"})
                return
        await self.app(scope, receive, send)


def serve(server: Any, transport: str, host: str = "127.0.0.1", port: int = 8931, token: str | None = None) -> None:
    """Run an ``MCPServer`` on ``stdio``, ``streamable-http`` or ``sse`` (blocks until stopped).

    ``token`` (default: ``$AWORLD_GYM_SERVER_TOKEN``) makes HTTP clients prove they were given it.
    """
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    if transport == "stdio":
        # SIGTERM (what a client sends a server that did not exit when its stdin closed) removes the process's temp
        # folders, then ends it at once. HTTP servers get uvicorn's own handler.
        exit_on_sigterm()
        server.run("stdio")
        return
    if not token:
        server.run(transport, host=host, port=port)
        return
    import uvicorn

    app = server.streamable_http_app(host=host) if transport == "streamable-http" else server.sse_app(host=host)
    uvicorn.run(BearerAuth(app, token), host=host, port=port, log_level="warning")
