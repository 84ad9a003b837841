"""The event loop that a face's envs live on, in a thread of its own (see :class:`EnvLoop`): for trainers that call
from a loop of their own, or from a new loop per call (ms-swift's colocate trainer), from synchronous code (TRL's
``rollout_func``), and for ``serve-env``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class EnvLoop:
    """The event loop a face's envs live on, in a thread of its own (started at first use).

    Every env call (reset, step, close) hops here: an env's MCP sessions are bound to the loop that first used it,
    so pooled envs that move between requests (or sessions) need one loop that outlives the caller's. On
    ``serve-env`` the server's own loop then only reads and writes sockets, so a step that is slow or CPU-bound never
    holds up ``/health``, another socket's messages or the session cap.

    Args:
        name: the thread's name.
    """

    def __init__(self, name: str = "aworld-gym-envs") -> None:
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self.loop is None:
                loop, ready = asyncio.new_event_loop(), threading.Event()
                self._thread = threading.Thread(target=self._main, args=(loop, ready), name=self.name,
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
        return await asyncio.wrap_future(self.submit(coro))

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the env loop from synchronous code; its future (for callers that work while it runs)."""
        return asyncio.run_coroutine_threadsafe(coro, self._started())

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the env loop from synchronous code and wait for its result (at most ``timeout`` s)."""
        return self.submit(coro).result(timeout)

    def stop(self) -> None:
        with self._lock:
            loop, thread, self.loop, self._thread = self.loop, self._thread, None, None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
