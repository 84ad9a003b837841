"""Deadlines for many awaits on one event loop with one timer, instead of one timer per await.

``asyncio.timeout`` schedules and cancels a timer handle for every call; on a fast transport (an in-process
MCP server answers in about half a millisecond) that bookkeeping is a visible share of a step. A
:class:`Watchdog` keeps the deadlines in a dict and arms a single timer for the earliest one; sequential calls
with the same timeout re-arm it about once per timeout period. The semantics are those of ``asyncio.timeout``:
an overdue task is cancelled, and :meth:`Deadline.expired` tells the awaiting code that the cancellation was
ours (so it can turn it into a timeout result) and not an outside one (which must propagate).
"""

from __future__ import annotations

import asyncio
import itertools


class Deadline:
    __slots__ = ("fired", "task", "when")

    def __init__(self, task: asyncio.Task, when: float) -> None:
        self.task = task
        self.when = when
        self.fired = False

    def expired(self) -> bool:
        """After a ``CancelledError`` (or any error) in the guarded await: was it our deadline that fired?

        Undoes our cancellation request when it was; returns False when someone else also cancelled the task,
        so that their cancellation propagates.
        """
        if not self.fired:
            return False
        self.fired = False
        return self.task.uncancel() == 0


class Watchdog:
    """Cancels tasks whose deadline passed. Bound to the loop of its first :meth:`add`."""

    def __init__(self) -> None:
        self._entries: dict[int, Deadline] = {}
        self._ids = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when = float("inf")

    def add(self, timeout: float) -> tuple[int, Deadline]:
        """Start guarding the current task for ``timeout`` seconds; pair with :meth:`remove` in ``finally``."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None, "Watchdog.add must be awaited inside a task"
        entry = Deadline(task, loop.time() + timeout)
        key = next(self._ids)
        self._entries[key] = entry
        if entry.when < self._timer_when:
            self._arm(loop, entry.when)
        return key, entry

    def remove(self, key: int) -> None:
        self._entries.pop(key, None)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_when = None, float("inf")
        self._entries.clear()

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(when, self._tick, loop)
        self._timer_when = when

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer, self._timer_when = None, float("inf")
        now = loop.time()
        earliest = float("inf")
        for key, entry in list(self._entries.items()):
            if entry.when <= now:
                # Fired once, then forgotten: its handler may await more (a probe) before ``remove``, and
                # ``expired()`` resets ``fired``; a second cancellation then would escape the handler.
                del self._entries[key]
                if not entry.task.done():
                    entry.fired = True
                    entry.task.cancel()
            else:
                earliest = min(earliest, entry.when)
        if earliest != float("inf"):
            self._arm(loop, earliest)
