"""The hub's one-timer deadline keeper: same semantics as asyncio.timeout."""

from __future__ import annotations

import asyncio

import pytest

from aworld_gym.mcp.watchdog import Watchdog


async def guarded(dog: Watchdog, timeout: float, sleep: float) -> str:
    key, deadline = dog.add(timeout)
    try:
        await asyncio.sleep(sleep)
        return "done"
    except asyncio.CancelledError:
        if deadline.expired():
            return "timeout"
        raise
    finally:
        dog.remove(key)
        deadline.expired()


def test_deadline_fires_and_fast_calls_pass() -> None:
    async def main() -> list[str]:
        dog = Watchdog()
        out = [await guarded(dog, 0.2, 0.0) for _ in range(50)]
        out.append(await guarded(dog, 0.05, 5.0))
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0  # our cancellation left nothing behind
        dog.close()
        return out

    out = asyncio.run(main())
    assert out[:50] == ["done"] * 50 and out[50] == "timeout"


def test_shorter_deadline_added_after_a_longer_one_still_fires_on_time() -> None:
    async def main() -> tuple[list[str], bool]:
        dog = Watchdog()
        slow = asyncio.create_task(guarded(dog, 30.0, 0.5))
        await asyncio.sleep(0)
        fast = asyncio.create_task(guarded(dog, 0.05, 5.0))
        out = [await fast]
        slow_still_sleeping = not slow.done()  # the 0.05 s deadline fired before the 0.5 s sleep ended, on any load
        out.append(await slow)
        dog.close()
        return out, slow_still_sleeping

    out, on_time = asyncio.run(main())
    assert out == ["timeout", "done"]
    assert on_time


def test_outside_cancellation_propagates() -> None:
    async def main() -> None:
        dog = Watchdog()
        task = asyncio.create_task(guarded(dog, 10.0, 5.0))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        dog.close()

    asyncio.run(main())


def test_many_concurrent_deadlines() -> None:
    async def main() -> list[str]:
        dog = Watchdog()
        jobs = [guarded(dog, 0.05 if i % 2 else 5.0, 0.3 if i % 2 else 0.01) for i in range(40)]
        out = await asyncio.gather(*jobs)
        dog.close()
        return out

    out = asyncio.run(main())
    assert out == ["timeout" if i % 2 else "done" for i in range(40)]


def test_a_fired_deadline_never_fires_again_while_its_handler_still_awaits() -> None:
    """After the deadline fired and was handled (``expired()``), the call's handler awaits more (the hub probes the
    session) before its ``finally`` removes the entry. Another call's deadline ticking meanwhile must not cancel it a
    second time: that cancellation escaped the handler, ended the step's task cancelled and, under the soak's 64
    concurrent envs, killed episode workers without a record."""

    async def probing(dog: Watchdog) -> str:
        key, deadline = dog.add(0.05)
        try:
            await asyncio.sleep(5.0)
            return "done"
        except asyncio.CancelledError:
            if deadline.expired():
                await asyncio.sleep(0.5)  # the probe; other deadlines tick meanwhile
                return "timeout"
            raise
        finally:
            dog.remove(key)
            deadline.expired()

    async def main() -> list[str]:
        dog = Watchdog()
        first = asyncio.create_task(probing(dog))
        await asyncio.sleep(0.1)  # the first deadline has fired; its handler is probing
        others = [asyncio.create_task(guarded(dog, 0.02 * (i + 1), 5.0)) for i in range(10)]
        out = [await first, *await asyncio.gather(*others)]
        dog.close()
        return out

    assert asyncio.run(main()) == ["timeout"] * 11
