"""One long-lived asyncio event loop in a daemon thread, shared by every ToolHub of the process.

MCP sessions are bound to the loop they were opened on. Running them all on one background loop gives
``env.step()`` a synchronous face (submit and wait) and async collectors an async face (await a wrapped
future from any loop) without ever opening a new loop or session per call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class BackgroundLoop:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="aworld-gym-mcp-loop", daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._started.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        self.loop.run_forever()

    @property
    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; returns a thread-safe future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result from a foreign thread."""
        if self.in_loop_thread:
            coro.close()
            raise RuntimeError("BackgroundLoop.run() called from the loop thread itself; await the coroutine instead")
        fut = self.submit(coro)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"operation did not finish within {timeout} s") from None

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the background loop from any other running loop (or from the loop itself)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            return await coro
        return await asyncio.wrap_future(self.submit(coro))


_lock = threading.Lock()
_instance: BackgroundLoop | None = None
_pid: int | None = None


def get_loop() -> BackgroundLoop:
    """The process-wide background loop (a new one after ``fork``, since threads do not survive it)."""
    global _instance, _pid
    with _lock:
        if _instance is None or _pid != os.getpid() or not _instance._thread.is_alive():
            _instance = BackgroundLoop()
            _pid = os.getpid()
        return _instance
