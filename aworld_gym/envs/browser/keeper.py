"""An idle MCP session that keeps a shared Playwright server's Chromium running between episodes.

Playwright MCP (``--isolated``) gives each MCP session a browser context, made at the session's first tool call, and
closes the whole browser when the last session's context closes. The browser env closes its context at every reset
(``browser_close``: a fresh context per episode), so with one env on a server every reset launched a new Chromium
(measured: about 0.35 CPU-seconds and 0.25 s more per reset on a 2-core machine). The keeper is one more session on the server, whose context (no page: the
tool it calls does not exist, which is enough to make the context) keeps the browser up. It runs on the process-wide
background loop; it is only an optimisation, so its failures are logged and never reach an env.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time

from aworld_gym.mcp.config import ServerSpec
from aworld_gym.mcp.connection import Connection
from aworld_gym.mcp.loop import get_loop

logger = logging.getLogger(__name__)

KEEP_TOOL = "aworld_gym_keep_browser"  # no such tool: calling it makes the session's context and nothing else
EVERY_S = 1.0  # an env's reset pokes at most this often per server (a poke is one small request)


class Keeper:
    """The keeper session of one start of a shared Playwright server (``url``, over the Unix ``socket``)."""

    def __init__(self, url: str, socket: str | None) -> None:
        self.spec = ServerSpec(name="browser-keeper", type="streamable-http", url=url, socket=socket)
        self.background = get_loop()
        self.pokes = 0  # contexts asked for (a start, and after each browser failure)
        self._conn: Connection | None = None
        self._lock: asyncio.Lock | None = None
        self._closed = False
        self._poked_at = -EVERY_S

    def poke(self, force: bool = True) -> concurrent.futures.Future[None] | None:
        """Make sure the keeper's context exists: again after the browser died (its context went with it, and the
        next env call launched a new browser, which that env's next ``browser_close`` would close). Returns at once;
        ``force=False`` (every reset): at most once per :data:`EVERY_S`."""
        now = time.monotonic()
        if not force and now - self._poked_at < EVERY_S:
            return None
        self._poked_at = now
        return asyncio.run_coroutine_threadsafe(self._apoke(), self.background.loop)

    async def _apoke(self) -> None:
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            if self._closed:
                return
            try:
                if self._conn is None or not self._conn.alive or self._conn.transport_done():
                    if self._conn is not None:
                        await self._conn.stop()
                    self._conn = Connection(self.spec)
                    await self._conn.start()
                await self._conn.client.call_tool(KEEP_TOOL, {})  # "not found": the context was made first
                self.pokes += 1
            except Exception as exc:  # noqa: BLE001 - an optimisation: the envs work without it
                logger.debug("the browser keeper session failed: %r", exc)

    def close(self, timeout: float = 5.0) -> None:
        """End the session (before its server stops, so that its end is not reported as a failure)."""
        done = asyncio.run_coroutine_threadsafe(self._aclose(), self.background.loop)
        if threading.current_thread() is self.background._thread:
            return  # called on the keeper's own loop: it closes as soon as this call returns
        with contextlib.suppress(Exception):
            done.result(timeout)

    async def _aclose(self) -> None:
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                await conn.stop()
