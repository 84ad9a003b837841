"""Streaming rollouts: records and complete GRPO groups as they finish, bounded work, clean cancellation."""

import asyncio
import threading
import time

import gymnasium as gym
import pytest

from aworld_gym.rollout.engines import AsyncEngine
from aworld_gym.rollout.policies.plan import PlanPolicy
from aworld_gym.rollout.stream import astream_groups, stream, stream_groups
from tests.helpers import child_pids, demo_env_kwargs, wait_until


class Counting(PlanPolicy):
    """A plan policy with a latency that counts the episodes started and the turns in flight."""

    def __init__(self, latency_s=0.05):
        super().__init__(latency_s=latency_s)
        self.lock = threading.Lock()
        self.in_flight = self.peak = self.first_turns = 0

    async def aact(self, env, observation, info):
        with self.lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self.first_turns += env.turn == 0
        try:
            return await super().aact(env, observation, info)
        finally:
            with self.lock:
                self.in_flight -= 1


def env_kwargs(n=8, transport="inprocess"):
    return demo_env_kwargs(n, transport)


def test_stream_yields_every_record_as_it_finishes():
    policy = Counting()
    t0 = time.perf_counter()
    arrivals = []
    with stream("AWorld/MCP-v0", policy, episodes=12, env_kwargs=env_kwargs(), engine=AsyncEngine(4)) as records:
        for r in records:
            arrivals.append(time.perf_counter() - t0)
            assert r["termination"] == "answer" and r["reward"] == 1.0
    assert len(arrivals) == 12 and policy.peak <= 4
    assert arrivals[-1] - arrivals[0] >= 0.15  # records came wave by wave (3 waves of 2 x 0.05 s), not at the end


def test_stream_groups_yields_whole_groups_of_one_task():
    groups = list(stream_groups("AWorld/MCP-v0", Counting(), episodes=12, group_size=3, env_kwargs=env_kwargs(4),
                                engine=AsyncEngine(5)))  # fmt: skip
    assert len(groups) == 4
    for g in groups:
        assert len(g) == 3 and len({r["task_id"] for r in g}) == 1 and len({r["sample"] for r in g}) == 3


def test_work_in_flight_is_bounded_by_a_slow_consumer():
    policy = Counting(latency_s=0.0)
    it = stream("AWorld/MCP-v0", policy, episodes=40, env_kwargs=env_kwargs(), engine=AsyncEngine(3), buffer=2)
    taken = [next(it) for _ in range(2)]
    time.sleep(1.0)  # the consumer is busy: the producers must wait
    # started <= consumed + buffered (2) + queued in the engine (3) + in flight (3) + the one being handed over
    assert policy.first_turns <= len(taken) + 2 + 3 + 3 + 1
    it.close()
    assert policy.first_turns < 40


def test_leaving_early_stops_the_workers_and_closes_every_env():
    before = child_pids()
    policy = Counting(latency_s=0.2)
    with stream("AWorld/MCP-v0", policy, episodes=50, env_kwargs=env_kwargs(8, "stdio"), engine=AsyncEngine(4)) as s:
        first = next(s)
        assert wait_until(lambda: len(child_pids() - before) >= 4, 30)  # four stdio servers, one per env
    assert first["termination"] == "answer"
    assert wait_until(lambda: not (child_pids() - before), 20)  # every server process is gone
    started = policy.first_turns
    time.sleep(0.5)
    assert policy.first_turns == started < 50  # nothing runs any more


def test_astream_groups_on_the_callers_loop():
    async def main():
        out = []
        async for group in astream_groups("AWorld/MCP-v0", PlanPolicy(), episodes=4, group_size=2,
                                          env_kwargs=env_kwargs(2), engine=AsyncEngine(4)):  # fmt: skip
            out.append(sorted(r["sample"] for r in group))
        return out

    assert asyncio.run(main()) == [[0, 1], [0, 1]]


def test_a_failing_setup_is_raised_in_the_consumer():
    with pytest.raises(gym.error.Error, match="Did you mean"):
        list(stream("AWorld/MCPP-v0", PlanPolicy(), episodes=2))


def test_a_rollout_has_every_attribute_before_it_opens():
    from aworld_gym.rollout.stream import Rollout

    r = Rollout("AWorld/MCP-v0", PlanPolicy(), episodes=3, env_kwargs=env_kwargs(2))
    assert (r.task_ids, r.jobs, r.todo, r.groups) == ([], [], [], None)  # task_ids was first set by open()
    try:
        r.open()
        assert r.task_ids == ["add-0", "add-1"] and [j.task_index for j in r.todo] == [0, 1, 0]
    finally:
        r.close()
