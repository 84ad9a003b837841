"""Edge cases of the core v2 contract found in review: nested turn limits, failed construction, slow restarts,
scorers that raise, partial hook output, subclasses that lose their async face."""

import asyncio
import itertools
import json
import pickle
import subprocess
import sys
import time

import gymnasium as gym
import pytest
from gymnasium.wrappers import TimeLimit, TransformReward

import aworld_gym
from aworld_gym.core.env import MCPEnv
from aworld_gym.core.faces import AsyncFaceError, async_face, check_async
from aworld_gym.core.rewards import Hook, Rubric, Scores
from aworld_gym.mcp.demo_server import build_server
from aworld_gym.rollout.envs import env_factory
from aworld_gym.wrappers import RewardShaping
from tests.helpers import TASKS

CALL = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 1}}</tool_call>'


def make(**kw):
    return gym.make("AWorld/MCP-v0", mcp_config={"mcpServers": {"demo": build_server}}, tasks=TASKS, **kw)


def test_an_outer_time_limit_wins_and_does_not_stick():
    env = async_face(TimeLimit(make(), 2))  # around gym.make's own TimeLimit(20), on the async face

    async def two_steps():
        await env.areset(options={"task_id": "add"})
        await env.astep(CALL)
        out = await env.astep(CALL)
        await env.aclose()
        return out

    out = asyncio.run(two_steps())
    assert out[3] and out[4]["truncation_reason"] == "turn_limit"
    # The sync face: Gymnasium's own TimeLimit truncates, unchanged, and tells no one (nothing of it is patched).
    env = TimeLimit(make(), 2)
    env.reset(options={"task_id": "add"})
    env.step(CALL)
    out = env.step(CALL)
    assert out[3] and "truncation_reason" not in out[4] and env.unwrapped.turn_limit == 20
    raw = env.unwrapped  # reset with nothing told: its id's registered limit, not the 2 told before
    raw.reset(options={"task_id": "add"})
    assert raw.turn_limit == 20
    for _ in range(3):
        assert not raw.step(CALL)[3]
    env.close()


class Slow:
    """A resource whose restart check takes a while (a shared server coming back)."""

    starts = 0

    def acquire(self):
        return "http://127.0.0.1:1/"

    def ensure_alive(self):
        time.sleep(0.5)

    def release(self):
        self.released = True


class Holding(MCPEnv):
    def __init__(self, resource, **kw):
        self.hold(resource)
        super().__init__({"mcpServers": {"demo": build_server}}, TASKS, **kw)


def test_areset_does_not_block_the_loop_while_a_resource_restarts():
    env = Holding(Slow())

    async def main():
        ticks = []

        async def ticker():
            for _ in range(10):
                ticks.append(time.perf_counter())
                await asyncio.sleep(0.05)

        await asyncio.gather(env.areset(options={"task_id": "add"}), ticker())
        await env.aclose()
        return max(b - a for a, b in itertools.pairwise(ticks))

    assert asyncio.run(main()) < 0.3  # the 0.5 s check ran in a thread


def test_a_failed_construction_releases_what_it_held():
    slow = Slow()
    with pytest.raises(aworld_gym.base.errors.ConfigError, match="callable"):
        Holding(slow, reward_hooks=[42])
    assert slow.released


def test_a_scorer_that_raises_is_the_envs_crash_not_the_answer():
    def broken(answer, task):
        raise ValueError("scorer bug")

    env = make(scorer=broken)
    env.reset(options={"task_id": "add"})
    obs, r, te, tr, info = env.step("<answer>5</answer>")
    assert (te, tr, info["truncation_reason"]) == (False, True, "env_crash") and "scorer bug" in info["action_error"]
    assert info["score"] is None and len(env.unwrapped.turns) == 1
    env.close()


def test_records_keep_what_the_outermost_env_returned():
    from aworld_gym.rollout.driver import run_episode
    from aworld_gym.rollout.policies.plan import PlanPolicy
    from tests.helpers import demo_env_kwargs

    env = TransformReward(gym.make("AWorld/MCP-v0", **demo_env_kwargs(2)), lambda r: 10 * r)
    rec = run_episode(env, PlanPolicy(), env_id="x", options={"task_index": 0})
    assert rec["reward"] == 10.0 and rec["turns"][-1]["reward"] == 10.0 and rec["reward_components"] == {"task": 1.0}
    env.close()


def test_a_hook_with_a_bad_value_adds_nothing():
    out = Rubric([lambda ctx: {"a": 1.0, "b": "not a number"}]).score(Rubric([]).step, None)
    assert out.components == {}
    s = Scores()
    with pytest.raises(ValueError):
        s.add(Hook(lambda c: 0, name="h"), {"a": 1.0, "b": "x"})
    assert s.components == {}


class StepOnly(RewardShaping):
    def step(self, action):
        obs, r, te, tr, info = super().step(action)
        return obs, r + 1, te, tr, info


def test_a_subclass_overriding_step_below_an_astep_is_refused():
    env = StepOnly(make(), [])
    with pytest.raises(AsyncFaceError, match="StepOnly overrides step"):
        check_async(env)
    env.close()


def test_an_id_registered_in_the_driver_is_made_in_another_process(tmp_path):
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps(TASKS[0]) + "\n")
    cfg = {"mcpServers": {"d": {"command": sys.executable, "args": ["-m", "aworld_gym.mcp.demo_server"]}}}
    aworld_gym.register("Driver/Only-v0", "aworld_gym.core.env:MCPEnv", max_episode_steps=3, mcp_config=cfg,
                        tasks=str(tasks))  # fmt: skip
    blob = tmp_path / "make.pkl"
    blob.write_bytes(pickle.dumps(env_factory("Driver/Only-v0")))
    code = f"""
import pickle
env = pickle.loads(open({str(blob)!r}, "rb").read())()
obs, info = env.reset()
print(obs, env.spec.max_episode_steps)
env.close()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{TASKS[0]['prompt']} 3"
