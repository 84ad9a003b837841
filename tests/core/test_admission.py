"""Admission: the fair gate Browser-v0 drives its browsers through (aworld_gym.core.admission)."""

from __future__ import annotations

import asyncio
import functools
import threading
import time

import pytest

from aworld_gym.base.errors import ConfigError
from aworld_gym.core import admission
from aworld_gym.core.admission import Admission


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "2"])
def test_limit_must_be_a_whole_number(limit):
    with pytest.raises(ConfigError, match="whole number >= 1"):
        Admission(limit)


def test_never_more_than_the_limit_and_first_come_first_served():
    gate = Admission(2)
    inside, most, order = 0, 0, []

    async def worker(k: int) -> None:
        nonlocal inside, most
        async with gate.ahold():
            inside += 1
            most = max(most, inside)
            order.append(k)
            await asyncio.sleep(0.01)
            inside -= 1

    async def main() -> None:
        tasks = []
        for k in range(12):
            tasks.append(asyncio.create_task(worker(k)))
            await asyncio.sleep(0)  # each one queues in turn
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert most == 2
    assert order == list(range(12))  # nobody overtaken
    assert (gate.held, gate.waiting, gate.admitted) == (0, 0, 12)
    assert gate.queued == 10


def test_a_waiter_cancelled_leaves_the_queue_and_a_granted_one_gives_its_slot_on():
    gate = Admission(1)

    async def main() -> None:
        await gate.acquire()
        waiter = asyncio.create_task(gate.acquire())
        await asyncio.sleep(0.01)
        assert gate.waiting == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert gate.waiting == 0 and gate.held == 1
        # granted, then cancelled before it ran: the slot passes on, not lost
        second = asyncio.create_task(gate.acquire())
        third = asyncio.create_task(gate.acquire())
        await asyncio.sleep(0.01)
        gate.release()  # the slot goes to `second` (its wake-up is scheduled)
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        await asyncio.wait_for(third, 2)  # it got the slot `second` gave back
        assert gate.held == 1
        gate.release()
        assert gate.held == 0

    asyncio.run(main())


def test_threads_and_event_loops_share_one_queue():
    gate = Admission(1)
    events: list[str] = []
    gate.acquire_sync()  # held by the main thread
    started = threading.Event()

    def loop_holder() -> None:
        async def main() -> None:
            started.set()
            async with gate.ahold():
                events.append("loop")

        asyncio.run(main())

    def thread_holder() -> None:
        with gate.hold():
            events.append("thread")

    first = threading.Thread(target=loop_holder)
    first.start()
    started.wait(5)
    deadline = time.monotonic() + 5
    while gate.waiting < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    second = threading.Thread(target=thread_holder)
    second.start()
    while gate.waiting < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert gate.waiting == 2 and events == []  # both wait while the main thread holds it
    gate.release()
    first.join(5)
    second.join(5)
    assert events == ["loop", "thread"]
    assert gate.held == 0


def test_release_without_acquire_is_an_error():
    with pytest.raises(RuntimeError, match="released more often"):
        Admission(1).release()


def test_a_blocking_wait_on_an_event_loops_thread_is_refused_not_a_frozen_loop():
    gate = Admission(1)

    async def main() -> None:
        gate.acquire_sync()  # a free slot: taken at once, even here
        with pytest.raises(RuntimeError, match="use the async face"):
            gate.acquire_sync()  # none free: waiting would stop this loop (and the holder on it)
        assert gate.waiting == 0 and gate.held == 1
        gate.release()

    asyncio.run(main())
    assert gate.held == 0


def test_an_interrupted_thread_waiter_leaves_no_slot_behind(monkeypatch):
    class Interrupted(threading.Event):
        def wait(self, timeout=None):  # as Ctrl-C arriving while the thread waits
            raise KeyboardInterrupt

    gate = Admission(1)
    gate.acquire_sync()
    monkeypatch.setattr(admission, "_Waiter", functools.partial(admission._Waiter, event=Interrupted()))
    with pytest.raises(KeyboardInterrupt):
        gate.acquire_sync()
    assert gate.waiting == 0 and gate.held == 1  # it left the queue
    gate.release()
    assert gate.held == 0
