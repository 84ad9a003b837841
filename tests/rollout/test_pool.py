"""EnvPool: the envs of a run are closed at once at its end, and one that fails to close does not stop the rest."""

from __future__ import annotations

import asyncio

from aworld_gym.rollout.pool import EnvPool


class SlowClose:
    """An env whose close waits until every env of the pool is closing: closed one after another, it never ends."""

    def __init__(self, closing: list[SlowClose], everyone: asyncio.Event, n: int, fail: bool = False) -> None:
        self.closing, self.everyone, self.n, self.fail = closing, everyone, n, fail
        self.closed = False

    async def aclose(self) -> None:
        self.closing.append(self)
        if len(self.closing) == self.n:
            self.everyone.set()
        await self.everyone.wait()
        if self.fail:
            raise RuntimeError("this env's server would not stop")
        self.closed = True


def test_the_idle_envs_close_at_once_and_a_failure_closes_the_rest() -> None:
    async def main() -> list[SlowClose]:
        closing: list[SlowClose] = []
        everyone = asyncio.Event()
        envs = [SlowClose(closing, everyone, 8, fail=(i == 3)) for i in range(8)]
        pool = EnvPool(lambda: None, max_idle=8)
        for env in envs:
            await pool.release(env)
        await asyncio.wait_for(pool.aclose(), 10)  # sequential closes would wait for ever at the first one
        return envs

    envs = asyncio.run(main())
    assert [e.closed for e in envs] == [i != 3 for i in range(8)]
