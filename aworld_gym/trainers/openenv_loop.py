"""The event loop that ``serve-env``'s envs live on, in a thread of its own (see :class:`EnvLoop`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any


class EnvLoop:
    """The event loop the served envs live on, in a thread of its own (started at first use).

    The server's own loop only reads and writes sockets: every env call (reset, step, close) hops here, so a step
    that is slow or CPU-bound never holds up ``/health``, another socket's messages or the session cap. All envs
    share this one loop (an env's MCP sessions are bound to the loop that first used it, and pooled envs move
    between sessions).
    """

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self.loop is None:
                loop, ready = asyncio.new_event_loop(), threading.Event()
                self._thread = threading.Thread(target=self._main, args=(loop, ready), name="aworld-gym-serve-env",
                                                daemon=True)  # fmt: skip
                self._thread.start()
                ready.wait()
                self.loop = loop
            return self.loop

    @staticmethod
    def _main(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Await ``coro`` on the env loop (cancelling this await cancels it there)."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._started()))

    def stop(self) -> None:
        with self._lock:
            loop, thread, self.loop, self._thread = self.loop, self._thread, None, None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
