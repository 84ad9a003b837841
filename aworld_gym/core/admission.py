"""Admission control: at most ``limit`` holders at once, first come first served, across threads and event loops.

A browser on a starved machine times out its own actions (Playwright's 5 s action and 60 s navigation timeouts), so
work that would starve it waits here instead, in the driver, where no server's clock runs. Holders on any event loop
(``async with gate.ahold()``) and in plain threads (``with gate.hold()``) share one queue; a slot freed by a release
passes straight to the longest waiting holder, so no waiter is overtaken by a late comer.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

from aworld_gym.base.errors import ConfigError


@dataclass(eq=False)
class _Waiter:
    loop: asyncio.AbstractEventLoop | None = None
    future: asyncio.Future[None] | None = None
    event: threading.Event = field(default_factory=threading.Event)
    granted: bool = False


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Admission:
    """A fair, thread-safe counting gate.

    Args:
        limit: how many may hold it at once (>= 1).

    Attributes:
        held: holders now.
        admitted: holders so far.
        queued: holders that had to wait for a slot.
    """

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"an admission limit must be a whole number >= 1, not {limit!r}")
        self.limit = limit
        self.held = 0
        self.admitted = 0
        self.queued = 0
        self._lock = threading.Lock()
        self._queue: deque[_Waiter] = deque()

    @property
    def waiting(self) -> int:
        """Holders waiting for a slot now."""
        return len(self._queue)

    def _try(self) -> bool:
        if self.held < self.limit and not self._queue:
            self.held += 1
            self.admitted += 1
            return True
        return False

    def _enqueue(self, waiter: _Waiter) -> _Waiter:
        self._queue.append(waiter)
        self.queued += 1
        return waiter

    async def acquire(self) -> None:
        """Wait (on the running loop, without blocking it) for a slot."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._try():
                return
            waiter = self._enqueue(_Waiter(loop, loop.create_future()))
        try:
            assert waiter.future is not None
            await waiter.future
        except BaseException:  # cancelled while waiting, or just after the slot was passed on to it
            self._withdraw(waiter)
            raise

    def acquire_sync(self) -> None:
        """Wait (blocking this thread) for a slot.

        Raises:
            RuntimeError: no slot is free and this thread runs an event loop: waiting would stop that loop, and
                with it any holder on it (use :meth:`acquire` there).
        """
        with self._lock:
            if self._try():
                return
            if _loop_running():
                raise RuntimeError(
                    "a blocking wait for an admission slot on an event loop's thread would stop that loop: "
                    "use the async face there (await env.astep(...), await env.areset(...))"
                )
            waiter = self._enqueue(_Waiter())
        try:
            waiter.event.wait()
        except BaseException:  # interrupted (Ctrl-C): the slot is not lost
            self._withdraw(waiter)
            raise

    def _withdraw(self, waiter: _Waiter) -> None:
        """A waiter gives up: its slot passes on if it was granted one, else it leaves the queue."""
        with self._lock:
            if waiter.granted:
                self._release_locked()
            else:
                with contextlib.suppress(ValueError):  # skipped already: its loop was closed
                    self._queue.remove(waiter)

    def release(self) -> None:
        """Give a slot back (to the longest waiting holder, if any)."""
        with self._lock:
            self._release_locked()

    def _release_locked(self) -> None:
        if self.held <= 0:
            raise RuntimeError("Admission released more often than acquired")
        self.held -= 1
        while self._queue and self.held < self.limit:
            waiter = self._queue.popleft()
            if waiter.loop is not None:
                assert waiter.future is not None
                try:
                    waiter.loop.call_soon_threadsafe(_wake, waiter.future)
                except RuntimeError:  # its loop is closed: nobody waits there any more
                    continue
            else:
                waiter.event.set()
            waiter.granted = True
            self.held += 1
            self.admitted += 1

    @contextlib.asynccontextmanager
    async def ahold(self) -> AsyncIterator[None]:
        """``async with gate.ahold():`` hold a slot for the block."""
        await self.acquire()
        try:
            yield
        finally:
            self.release()

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """``with gate.hold():`` hold a slot for the block (blocking this thread while it waits)."""
        self.acquire_sync()
        try:
            yield
        finally:
            self.release()
