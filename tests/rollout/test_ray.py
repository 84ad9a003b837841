"""The Ray engine and RayVectorEnv on a real local Ray runtime."""

import functools
import os

import gymnasium as gym
import numpy as np
import pytest

import aworld_gym  # noqa: F401
from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.plan import PlanPolicy
from tests.helpers import demo_env_kwargs

ENV = "AWorld/MCP-v0"
ADD = '<tool_call>{{"name": "add", "arguments": {{"a": {a}, "b": 1}}}}</tool_call>'


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(address="local", include_dashboard=False, log_to_driver=False, num_cpus=2)
    yield ray
    ray.shutdown()


class DyingPolicy(PlanPolicy):
    """Kills its own worker process (the Ray actor) when it meets task add-3."""

    def decide(self, env):
        if env.task.id == "add-3":
            os._exit(1)
        return super().decide(env)


def test_ray_engine_collects_everything(ray_local, tmp_path):
    s = collect(ENV, functools.partial(PlanPolicy, latency_s=0.1), episodes=12, concurrency=6, engine="ray",
                env_kwargs=demo_env_kwargs(6), sink=tmp_path / "r.jsonl", progress=False)  # fmt: skip
    assert (s.recorded, s.successes, s.engine) == (12, 12, "ray")


def test_a_killed_actor_loses_only_its_episodes(ray_local, tmp_path):
    import json

    out = tmp_path / "k.jsonl"
    s = collect(ENV, DyingPolicy, episodes=10, concurrency=4, engine="ray", ray_actors=2,
                env_kwargs=demo_env_kwargs(10), sink=out, progress=False)  # fmt: skip
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    keys = [(r["task_id"], r["sample"]) for r in rows]
    assert len(rows) == 10 and len(set(keys)) == 10  # every episode recorded, none twice
    crashed = {r["task_id"] for r in rows if r["termination"] == "env_crash"}
    assert "add-3" in crashed and all(r["truncated"] for r in rows if r["termination"] == "env_crash")
    assert s.failures.get("env_crash", 0) == len(crashed) and s.successes == 10 - len(crashed) >= 6


def drive(envs, steps):
    out = [envs.reset(seed=[0, 1, 2])]
    for actions in steps:
        out.append(envs.step(actions))
    envs.close()
    return out


def test_ray_vector_env_matches_the_sync_one(ray_local):
    kw = demo_env_kwargs(5)
    steps = [
        [ADD.format(a=1), "<answer>2.0</answer>", "nonsense"],
        ["<answer>9</answer>", ADD.format(a=4), ADD.format(a=2)],  # env 1 autoresets on this step
        [ADD.format(a=3), ADD.format(a=0), "<answer>3.0</answer>"],
    ]
    ray_out = drive(gym.make_vec(ENV, num_envs=3, vectorization_mode="vector_entry_point", **kw), steps)
    sync_out = drive(gym.make_vec(ENV, num_envs=3, vectorization_mode="sync", **kw), steps)
    async_out = drive(gym.make_vec(ENV, num_envs=3, vectorization_mode="async", **kw), steps)
    for r, s, a in zip(ray_out, sync_out, async_out, strict=True):
        assert tuple(r[0]) == tuple(s[0]) == tuple(a[0])  # observations
        for k in (1, 2, 3) if len(r) == 5 else ():
            np.testing.assert_array_equal(r[k], s[k])  # rewards, terminated, truncated
            np.testing.assert_array_equal(a[k], s[k])
    assert ray_out[2][2].tolist() == [True, False, False] or ray_out[1][2].tolist() == [False, True, False]


def test_ray_vector_env_errors_timeouts_and_dead_actors(ray_local):
    envs = gym.make_vec(ENV, num_envs=2, vectorization_mode="vector_entry_point", **demo_env_kwargs(3))
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    with pytest.raises(RuntimeError, match=r"sub-env 0 of AWorld/MCP-v0 raised in reset\(\)(.|\n)*TaskError"):
        envs.reset(options={"task_id": "no-such-task"})
    envs.reset(seed=0)
    envs.step_async(['<tool_call>{"name": "sleep", "arguments": {"seconds": 2}}</tool_call>', ADD.format(a=1)])
    with pytest.raises(TimeoutError, match=r"did not answer within 0\.2 s"):
        envs.step_wait(timeout=0.2)
    obs, *_ = envs.step_wait(timeout=30)
    assert "slept 2" in obs[0]
    envs.unwrapped.kill_actor(1)
    obs, rewards, terms, truncs, info = envs.step([ADD.format(a=5), ADD.format(a=6)])
    assert truncs.tolist() == [False, True] and info["truncation_reason"][1] == "env_crash"
    assert "6.0" in obs[0] and obs[1].startswith("What is") and envs.unwrapped.replaced == 1
    obs, *_ = envs.step([ADD.format(a=1), ADD.format(a=1)])  # the replacement works (autoreset of env 1)
    assert "2.0" in obs[0]
    envs.close()
