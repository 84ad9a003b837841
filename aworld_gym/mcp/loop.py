"""Event loops for ToolHubs: each hub binds to one long-lived loop (see :class:`HubLoop`).

MCP sessions are bound to the loop they were opened on, so a hub never opens a new loop or session per
call. A process-wide background loop thread serves hubs whose sync face is used inside a running loop.
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


class HubLoop:
    """The event loop one ToolHub lives on, bound at first use, with a sync and an async face.

    - First used synchronously (``env.step``) in a thread with no running loop: a private loop that the caller's
      thread drives with ``run_until_complete`` for each call. No thread hop per call, which matters on VMs
      where waking another thread costs more than a local MCP call.
    - First used synchronously inside a running loop (e.g. Jupyter): the process-wide background loop thread.
    - First used asynchronously (``await env.astep``): the caller's running loop.

    Either way the loop lives as long as the hub, and every MCP session stays on it.

    Args:
        background: bind synchronous use to the background loop even where a private loop would do (a hub with a
            pooled server: pools are per loop, so the hubs of a process share one only on a common loop; each call
            then costs a thread hop, cheaper than a server process per hub).
    """

    def __init__(self, background: bool = False) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._background: BackgroundLoop | None = None
        self._lock = threading.Lock()
        self._prefer_background = background

    @property
    def private(self) -> bool:
        return self.loop is not None and self._background is None and not self.loop.is_running()

    def _bind_sync(self) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            if not self._prefer_background:
                self.loop = asyncio.new_event_loop()
                return
        self._background = get_loop()
        self.loop = self._background.loop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` to completion from synchronous code."""
        if self.loop is None:
            self._bind_sync()
        loop = self.loop
        assert loop is not None
        if loop.is_closed():
            coro.close()
            raise RuntimeError("the event loop this env was bound to is closed; create a new env")
        if self._background is None and not loop.is_running():
            # This thread drives the loop: every call inside is bounded by its own timeout.
            with self._lock:
                return loop.run_until_complete(coro)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise RuntimeError(
                "a synchronous call (env.step/reset/close) was made inside the event loop this env is bound to; "
                "use await env.astep()/areset()/aclose() there instead"
            )
        fut = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"operation did not finish within {timeout} s") from None

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the hub's loop from any running loop."""
        running = asyncio.get_running_loop()
        if self.loop is None:
            self.loop = running
        loop = self.loop
        if running is loop:
            return await coro
        if self._background is None and not loop.is_running():
            # A private loop driven by sync calls: drive it from a worker thread, one call at a time.
            return await asyncio.to_thread(self.run, coro)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    def close(self) -> None:
        """Close a private loop (after the hub has closed its sessions on it)."""
        loop = self.loop
        if loop is not None and self._background is None and not loop.is_running() and not loop.is_closed():
            with self._lock:
                try:
                    loop.run_until_complete(loop.shutdown_asyncgens())
                finally:
                    loop.close()
