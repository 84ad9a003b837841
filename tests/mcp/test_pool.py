"""Pooled stdio servers (``"pool": K``): the hubs of one process share at most K server processes.

Against our demo server (``python -m aworld_gym.mcp.demo_server``) and the npm ``server-everything``; process
counts are asserted with the test process's children.
"""

from __future__ import annotations

import asyncio
import copy
import os
import signal
from collections import Counter

import pytest

from aworld_gym.base.calls import ToolCall
from aworld_gym.base.errors import ConfigError
from aworld_gym.core.faces import async_face
from aworld_gym.mcp.config import parse_mcp_config
from aworld_gym.mcp.demo_server import build_server
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.transports.pool import POOL
from tests.helpers import EVERYTHING_JS, child_pids, plan_tasks, stdio_config, wait_until

N = 8


def demo(**extra: object) -> dict:
    config = stdio_config()
    config["mcpServers"]["demo"].update(extra)
    return config


def everything(**extra: object) -> dict:
    return {"mcpServers": {"everything": {"command": "node", "args": [str(EVERYTHING_JS), "stdio"], **extra}}}


needs_node = pytest.mark.skipif(not EVERYTHING_JS.exists(), reason="npm install has not been run")


def spawned(before: set[int]) -> set[int]:
    return child_pids() - before


async def pids_of(hubs: list[ToolHub]) -> list[int]:
    return [int(r[0].text) for r in await asyncio.gather(*(h.acall([ToolCall("pid", {})]) for h in hubs))]


# ----- config -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ({"pool": 0}, "'pool' must be an integer >= 1"),
        ({"pool": -2}, "'pool' must be an integer >= 1"),
        ({"pool": "2"}, "'pool' must be an integer >= 1"),
        ({"pool": 1.5}, "'pool' must be an integer >= 1"),
        ({"pool": True}, "'pool' must be an integer >= 1"),
        ({"share": "yes"}, "'share' must be true or false"),
        ({"share": True, "pool": 2}, "give 'pool' (a number of processes) or 'share', not both"),
        ({"type": "streamable-http", "url": "http://127.0.0.1:1/mcp", "pool": 2}, "'pool' is for stdio servers"),
        ({"type": "sse", "url": "http://127.0.0.1:1/sse", "share": True}, "'share' is for stdio servers"),
    ],
)
def test_bad_pool_config_is_a_config_error_naming_the_key(entry, fragment):
    base = {"command": "python"} if "url" not in entry else {}
    with pytest.raises(ConfigError, match="mcpServers\\['s'\\]") as err:
        parse_mcp_config({"mcpServers": {"s": {**base, **entry}}})
    assert fragment in str(err.value)
    if "url" in entry:
        assert "share_session" in str(err.value)  # what to use for an HTTP server instead


def test_pool_config_values():
    assert parse_mcp_config(demo())[0].pool is None  # default: one process per env
    assert parse_mcp_config(demo(pool=3))[0].pool == 3
    assert parse_mcp_config(demo(share=True))[0].pool == 1
    assert parse_mcp_config(demo(share=False))[0].pool is None
    with pytest.raises(ConfigError, match="'pool' is for stdio servers"):
        parse_mcp_config({"mcpServers": {"s": {"server": build_server, "pool": 1}}})


# ----- our demo server ----------------------------------------------------------------------------------------
def test_pool_of_two_serves_eight_sync_hubs_and_stops_with_the_last():
    """8 hubs driven synchronously share 2 processes (4 each); closing 6 keeps both up; closing all leaves none."""
    before = child_pids()
    hubs = [ToolHub(demo(pool=2)).start() for _ in range(N)]
    try:
        assert len(spawned(before)) == 2
        adds = [h.call([ToolCall("add", {"a": i, "b": 0.5})])[0].text for i, h in enumerate(hubs)]
        assert adds == [f"{i + 0.5}" for i in range(N)]
        pids = [int(h.call([ToolCall("pid", {})])[0].text) for h in hubs]
        assert set(pids) == spawned(before) and sorted(Counter(pids).values()) == [4, 4]
        loop = hubs[0]._loop.loop
        assert sorted(refs for _, refs in POOL.members(hubs[0].specs[0], loop)) == [4, 4]
        for h in hubs[:6]:
            h.close()
        assert spawned(before) == set(pids)  # still serving the other two hubs
        assert [h.call([ToolCall("multiply", {"a": 6, "b": 7})])[0].text for h in hubs[6:]] == ["42.0", "42.0"]
    finally:
        for h in hubs:
            h.close()
    assert wait_until(lambda: not spawned(before)), spawned(before)
    assert POOL.members(hubs[0].specs[0], loop) == []


def test_concurrent_calls_from_all_hubs_on_one_loop():
    """8 hubs on one asyncio loop, 2 processes: every hub's concurrent calls come back right, and per-call ``_meta``
    keeps each hub's session and episode apart on the shared process (the demo ``counter``)."""
    before = child_pids()

    async def main() -> None:
        hubs = [ToolHub(demo(pool=2)) for _ in range(N)]
        await asyncio.gather(*(h.astart() for h in hubs))  # the two processes start concurrently
        try:
            assert len(spawned(before)) == 2
            calls = [[ToolCall("add", {"a": i, "b": j}, id=str(j)) for j in range(5)] for i in range(N)]
            results = await asyncio.gather(*(h.acall(c) for h, c in zip(hubs, calls, strict=True)))
            assert [[r.text for r in rs] for rs in results] == [[f"{i + j}.0" for j in range(5)] for i in range(N)]
            for _ in range(3):
                counts = await asyncio.gather(*(h.acall([ToolCall("counter", {})]) for h in hubs))
            assert [c[0].text for c in counts] == ["3"] * N  # one counter per hub, not per process
            await hubs[0].abegin_episode()
            assert (await hubs[0].acall([ToolCall("counter", {})]))[0].text == "1"  # a new episode of hub 0 only
            assert (await hubs[1].acall([ToolCall("counter", {})]))[0].text == "4"
            assert len(set(await pids_of(hubs))) == 2
        finally:
            await asyncio.gather(*(h.aclose() for h in hubs))
        assert wait_until(lambda: not spawned(before)), spawned(before)

    asyncio.run(main())


@pytest.mark.parametrize("entry", [{"pool": 1}, {"share": True}])
def test_pool_of_one(entry):
    before = child_pids()

    async def main() -> None:
        hubs = [ToolHub(demo(**entry)) for _ in range(4)]
        await asyncio.gather(*(h.astart() for h in hubs))
        try:
            assert len(spawned(before)) == 1
            assert len(set(await pids_of(hubs))) == 1
        finally:
            await asyncio.gather(*(h.aclose() for h in hubs))

    asyncio.run(main())
    assert wait_until(lambda: not spawned(before)), spawned(before)


def test_default_is_one_process_per_hub():
    before = child_pids()

    async def main() -> None:
        hubs = [ToolHub(demo()) for _ in range(3)]
        await asyncio.gather(*(h.astart() for h in hubs))
        try:
            assert len(spawned(before)) == 3
            assert len(set(await pids_of(hubs))) == 3
            assert not any(c.shared for h in hubs for c in h._conns)
        finally:
            await asyncio.gather(*(h.aclose() for h in hubs))

    asyncio.run(main())
    assert wait_until(lambda: not spawned(before)), spawned(before)


def test_different_commands_are_different_pools():
    """The pool key is the whole launch spec: another env variable means other processes."""
    before = child_pids()

    async def main() -> None:
        a = [ToolHub(demo(pool=1)) for _ in range(2)]
        b = [ToolHub(demo(pool=1, env={"AWORLD_TEST_POOL": "b"})) for _ in range(2)]
        await asyncio.gather(*(h.astart() for h in a + b))
        try:
            assert len(spawned(before)) == 2
            pids = await pids_of(a + b)
            assert pids[0] == pids[1] and pids[2] == pids[3] and pids[0] != pids[2]
        finally:
            await asyncio.gather(*(h.aclose() for h in a + b))

    asyncio.run(main())
    assert wait_until(lambda: not spawned(before)), spawned(before)


def test_a_dead_pooled_process_is_restarted_once_for_all_its_hubs():
    """SIGKILL one process: the call that finds it dead says so, then every hub works again after one restart (call
    path); a crash found at the next reset is restarted by the reset (reset path). The other process is untouched."""
    before = child_pids()

    async def main() -> None:
        hubs = [ToolHub(demo(pool=2)) for _ in range(N)]
        await asyncio.gather(*(h.astart() for h in hubs))
        try:
            pids = await pids_of(hubs)
            victim, other = pids[0], next(p for p in pids if p != pids[0])
            on_victim = [h for h, p in zip(hubs, pids, strict=True) if p == victim]
            conn = on_victim[0]._conns[0]
            assert all(h._conns[0] is conn for h in on_victim) and conn.generation == 1
            os.kill(victim, signal.SIGKILL)
            assert wait_until(lambda: victim not in child_pids())
            first = await asyncio.gather(*(h.acall([ToolCall("add", {"a": 1, "b": 1})]) for h in on_victim))
            assert all(r[0].text == "2.0" or r[0].error == "server_died" for r in first)
            again = await asyncio.gather(*(h.acall([ToolCall("add", {"a": 2, "b": 2})]) for h in hubs))
            assert [r[0].text for r in again] == ["4.0"] * N
            assert sum(h.restarts for h in hubs) == 1 and conn.generation == 2
            new = await pids_of(hubs)
            assert len(set(new)) == 2 and other in new and victim not in new
            assert len(spawned(before)) == 2

            # reset path: hub 0 crashes its process in a call; the next reset of every hub restarts it once
            crashed = (await on_victim[0].acall([ToolCall("crash", {})]))[0]
            assert crashed.error == "server_died" and not conn.alive
            await asyncio.gather(*(h.abegin_episode() for h in hubs))
            assert conn.alive and conn.generation == 3 and sum(h.restarts for h in hubs) == 2
            assert [r[0].text for r in await asyncio.gather(*(h.acall([ToolCall("noop", {})]) for h in hubs))] == [
                "ok"
            ] * N
            assert len(spawned(before)) == 2
        finally:
            await asyncio.gather(*(h.aclose() for h in hubs))

    asyncio.run(main())
    assert wait_until(lambda: not spawned(before)), spawned(before)


def test_an_unstartable_pooled_server_fails_every_waiting_hub_and_leaves_no_member():
    config = {"mcpServers": {"bad": {"command": "python", "args": ["-c", "import sys; sys.exit(3)"], "pool": 2}}}

    async def main() -> None:
        hubs = [ToolHub(copy.deepcopy(config)) for _ in range(3)]
        results = await asyncio.gather(*(h.astart() for h in hubs), return_exceptions=True)
        assert all(type(r).__name__ == "ServerError" and "'bad'" in str(r) for r in results)
        assert POOL.members(hubs[0].specs[0]) == []

    asyncio.run(main())


# ----- the npm server-everything --------------------------------------------------------------------------
@needs_node
def test_everything_server_pool_of_two():
    before = child_pids()

    async def main() -> None:
        hubs = [ToolHub(everything(pool=2)) for _ in range(N)]
        await asyncio.gather(*(h.astart() for h in hubs))
        try:
            procs = spawned(before)
            assert len(procs) == 2
            calls = [[ToolCall("echo", {"message": f"hub {i}"}), ToolCall("get-sum", {"a": i, "b": 10})]
                     for i in range(N)]  # fmt: skip
            results = await asyncio.gather(*(h.acall(c) for h, c in zip(hubs, calls, strict=True)))
            for i, (echo, total) in enumerate(results):
                assert echo.text == f"Echo: hub {i}" and f"The sum of {i} and 10 is {i + 10}." in total.text
            conns = {id(h._conns[0]) for h in hubs}
            assert len(conns) == 2
            assert sorted(refs for _, refs in POOL.members(hubs[0].specs[0])) == [4, 4]

            for h in hubs[:5]:
                await h.aclose()
            assert spawned(before) == procs
            assert len({id(h._conns[0]) for h in hubs[5:]}) == 2  # hubs 5 and 7 on one process, 6 on the other
            pid = min(procs)
            os.kill(pid, signal.SIGKILL)
            assert wait_until(lambda: pid not in child_pids())
            for _ in range(2):  # the first call may be the one that finds the process dead
                last = await asyncio.gather(*(h.acall([ToolCall("get-sum", {"a": 1, "b": 2})]) for h in hubs[5:]))
            assert all("is 3." in r[0].text for r in last)
            assert sum(h.restarts for h in hubs) == 1
            assert len(spawned(before)) == 2
        finally:
            await asyncio.gather(*(h.aclose() for h in hubs))

    asyncio.run(main())
    assert wait_until(lambda: not spawned(before)), spawned(before)


@needs_node
def test_everything_server_default_is_one_per_hub():
    before = child_pids()

    async def main() -> None:
        hubs = [ToolHub(everything()) for _ in range(3)]
        await asyncio.gather(*(h.astart() for h in hubs))
        try:
            assert len(spawned(before)) == 3
        finally:
            await asyncio.gather(*(h.aclose() for h in hubs))

    asyncio.run(main())
    assert wait_until(lambda: not spawned(before)), spawned(before)


# ----- through the env ------------------------------------------------------------------------------------
def _answer_episode_turns(i: int) -> tuple[str, str]:
    call = f'<tool_call>{{"name": "add", "arguments": {{"a": {i}, "b": 1}}}}</tool_call>'
    return call, f"<answer>{i + 1}.0</answer>"


def test_mcp_env_eight_envs_on_one_loop_share_two_processes():
    """gym.make("AWorld/MCP-v0") with ``"pool": 2``: 8 envs on one asyncio loop (areset/astep), 2 processes, every
    episode scored; a second episode after a reset; aclose of all leaves no process."""
    import gymnasium as gym

    import aworld_gym  # noqa: F401

    before = child_pids()
    tasks = plan_tasks(N)

    async def main() -> None:
        envs = [async_face(gym.make("AWorld/MCP-v0", mcp_config=demo(pool=2), tasks=tasks)) for _ in range(N)]
        try:
            for episode in range(2):
                await asyncio.gather(*(e.areset(seed=i, options={"task_index": i}) for i, e in enumerate(envs)))
                assert len(spawned(before)) == 2
                calls = await asyncio.gather(*(e.astep(_answer_episode_turns(i)[0]) for i, e in enumerate(envs)))
                assert all(f"{i + 1}.0" in obs for i, (obs, *_) in enumerate(calls)), (episode, calls)
                ends = await asyncio.gather(*(e.astep(_answer_episode_turns(i)[1]) for i, e in enumerate(envs)))
                assert [(r, term) for _, r, term, *_ in ends] == [(1.0, True)] * N
        finally:
            await asyncio.gather(*(e.aclose() for e in envs))
        assert wait_until(lambda: not spawned(before)), spawned(before)

    asyncio.run(main())


def test_mcp_env_sync_envs_share_the_pool():
    """Envs driven synchronously (reset/step) share the pool too: their hubs live on the background loop."""
    import gymnasium as gym

    import aworld_gym  # noqa: F401

    before = child_pids()
    envs = [gym.make("AWorld/MCP-v0", mcp_config=demo(pool=2), tasks=plan_tasks(4)) for _ in range(4)]
    try:
        for i, env in enumerate(envs):
            env.reset(seed=i, options={"task_index": i})
        assert len(spawned(before)) == 2
        for i, env in enumerate(envs):
            call, answer = _answer_episode_turns(i)
            assert f"{i + 1}.0" in env.step(call)[0]
            assert env.step(answer)[1] == 1.0
        envs[0].close()
        envs[0].close()  # twice is fine, and the others keep their processes
        envs[3].reset(seed=3, options={"task_index": 3})
        assert len(spawned(before)) == 2 and "4.0" in envs[3].step(_answer_episode_turns(3)[0])[0]
    finally:
        for env in envs:
            env.close()
    assert wait_until(lambda: not spawned(before)), spawned(before)
