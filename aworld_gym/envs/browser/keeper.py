"""An idle MCP session that keeps a shared Playwright server's Chromium running between episodes.

Playwright MCP (``--isolated``) gives each MCP session a browser context, made at the session's first tool call, and
closes the whole browser when the last session's context closes. The browser env closes its context at every reset
(``browser_close``: a fresh context per episode), so with one env on a server every reset launched a new Chromium
(measured: about 0.35 CPU-seconds and 0.25 s more per reset on a 2-core machine). The keeper is one more session on
the server, whose context (no page: the tool it calls does not exist, which is enough to make the context) keeps the
browser up. It starts at the first env reset's poke (an env that never resets its page, GAIA's browser, launches
nothing for it), runs on the process-wide background loop, and is only an optimisation: its failures are logged (the
first as a warning) and never reach an env.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
import time

from aworld_gym.base.errors import ServerError
from aworld_gym.mcp.config import ServerSpec
from aworld_gym.mcp.loop import get_loop
from aworld_gym.mcp.transports.connection import Connection

logger = logging.getLogger(__name__)

KEEP_TOOL = "aworld_gym_keep_browser"  # no such tool: calling it makes the session's context and nothing else
NOT_FOUND = f'Tool "{KEEP_TOOL}" not found'  # Playwright MCP's answer once the context exists
EVERY_S = 1.0  # an env's reset pokes at most this often per server (a poke is one small request)
POKE_TIMEOUT_S = 30.0  # a poke that waits on a browser launch longer than this gives up (the next one retries)


class Keeper:
    """The keeper session of one start of a shared Playwright server (``url``, over the Unix ``socket``)."""

    def __init__(self, url: str, socket: str | None) -> None:
        self.spec = ServerSpec(name="browser-keeper", type="streamable-http", url=url, socket=socket)
        self.background = get_loop()
        self.pid = os.getpid()
        self.pokes = 0  # times the keeper's context was confirmed (made, or made again after the browser died)
        self.failures = 0
        self._conn: Connection | None = None
        self._lock: asyncio.Lock | None = None  # made on the background loop, the only loop that uses it
        self._current: asyncio.Task[None] | None = None
        self._closed = False
        self._poked_at = -EVERY_S

    def poke(self, force: bool = True) -> concurrent.futures.Future[None] | None:
        """Make sure the keeper's context exists: again after the browser died (its context went with it, and the
        next env call launched a new browser, which that env's next ``browser_close`` would close). Returns at once;
        ``force=False`` (every reset): at most once per :data:`EVERY_S`."""
        now = time.monotonic()
        if self._closed or (not force and now - self._poked_at < EVERY_S):
            return None
        self._poked_at = now
        return asyncio.run_coroutine_threadsafe(self._apoke(), self.background.loop)

    async def _apoke(self) -> None:
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            if self._closed:
                return
            self._current = asyncio.current_task()
            try:
                await asyncio.wait_for(self._attach(), POKE_TIMEOUT_S)
            except asyncio.CancelledError:  # close(): the server is about to stop
                await self._drop()
                raise
            except Exception as exc:  # noqa: BLE001 - an optimisation: the envs work without it
                self.failures += 1
                logger.log(logging.WARNING if self.failures == 1 else logging.DEBUG,
                           "the browser keeper session failed (envs go on; a reset may launch a new browser): %r",
                           exc)  # fmt: skip
                await self._drop()  # a session the server closed looks alive: the next poke opens a new one
            finally:
                self._current = None

    async def _attach(self) -> None:
        if self._conn is None or not self._conn.alive or self._conn.transport_done():
            await self._drop()
            self._conn = Connection(self.spec)
            await self._conn.start()
        result = await self._conn.client.call_tool(KEEP_TOOL, {})
        text = " ".join(getattr(part, "text", "") for part in result.content)
        if NOT_FOUND not in text:  # e.g. the browser failed to launch: no context was made
            raise ServerError(f"the keeper got no browser context: {text[:300]}")
        self.pokes += 1

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.stop()
            conn.close_log()

    def close(self, timeout: float = 5.0) -> None:
        """End the session before its server stops (so that its end is not reported as a failure); a poke in
        progress is cancelled, later ones do nothing."""
        self._closed = True
        if os.getpid() != self.pid or not self.background._thread.is_alive():
            return  # a forked child: no thread runs the loop this session lived on
        done = asyncio.run_coroutine_threadsafe(self._aclose(), self.background.loop)
        if threading.current_thread() is self.background._thread:
            return  # on the keeper's own loop: it closes after this call (the server may be gone by then)
        with contextlib.suppress(Exception):
            done.result(timeout)

    async def _aclose(self) -> None:
        task = self._current
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await self._drop()
