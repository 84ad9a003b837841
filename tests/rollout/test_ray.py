"""The Ray engine and RayVectorEnv on a real local Ray runtime."""

import functools
import os

import gymnasium as gym
import numpy as np
import pytest

import aworld_gym  # noqa: F401
from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.policies.plan import PlanPolicy
from tests.helpers import DiesOncePolicy, DyingPolicy, demo_env_kwargs

ENV = "AWorld/MCP-v0"
ADD = '<tool_call>{{"name": "add", "arguments": {{"a": {a}, "b": 1}}}}</tool_call>'


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(address="local", include_dashboard=False, log_to_driver=False, num_cpus=2)
    yield ray
    ray.shutdown()


def test_ray_engine_collects_everything(ray_local, tmp_path):
    s = collect(ENV, functools.partial(PlanPolicy, latency_s=0.1), episodes=12, concurrency=6, engine="ray",
                env_kwargs=demo_env_kwargs(6), sink=tmp_path / "r.jsonl", progress=False)  # fmt: skip
    assert (s.recorded, s.successes, s.engine) == (12, 12, "ray")


def rows_of(path):
    import json

    return [json.loads(x) for x in path.read_text().splitlines()]


def test_a_killed_actors_jobs_are_run_again_elsewhere(ray_local, tmp_path):
    from aworld_gym.rollout.engines.ray_engine import RayEngine

    out, engine = tmp_path / "k.jsonl", RayEngine(concurrency=4, actors=2)
    s = collect(ENV, functools.partial(DiesOncePolicy, str(tmp_path / "died")), episodes=10, engine=engine,
                env_kwargs=demo_env_kwargs(10), sink=out, progress=False)  # fmt: skip
    rows, stats = rows_of(out), engine.last_run
    assert len({(r["task_id"], r["sample"]) for r in rows}) == len(rows) == 10  # every episode once
    assert s.successes == 10 and s.failures == {}  # the lost episodes re-ran: none recorded as env_crash
    add3 = next(j for j, r in enumerate(rows) if r["task_id"] == "add-3")
    assert rows[add3]["actor_attempts"] == 2 and stats.actors_lost == 1 and stats.duplicates == 0
    assert len(stats.attempts[3]) == 2  # job 3 (task add-3) was dispatched twice, recorded once
    rerun = {r["task_id"] for r in rows if r.get("actor_attempts")}  # add-3 and what shared its actor (2 slots)
    assert "add-3" in rerun and len(rerun) <= 2 and len(stats.reruns) == len(rerun)


def test_a_job_that_always_kills_its_actor_is_given_up_after_the_retries(ray_local, tmp_path):
    from aworld_gym.rollout.engines.ray_engine import RayEngine

    out, engine = tmp_path / "k.jsonl", RayEngine(concurrency=2, actors=2, job_retries=1)
    s = collect(ENV, DyingPolicy, episodes=10, engine=engine, env_kwargs=demo_env_kwargs(10), sink=out,
                progress=False)  # fmt: skip
    rows, stats = rows_of(out), engine.last_run
    assert len({(r["task_id"], r["sample"]) for r in rows}) == len(rows) == 10
    crashed = [r for r in rows if r["termination"] == "env_crash"]
    assert [r["task_id"] for r in crashed] == ["add-3"] and crashed[0]["truncated"] and crashed[0]["status"] == "void"
    assert "ActorDiedError" in crashed[0]["error"] and crashed[0]["actor_attempts"] == 2  # run 1 + 1 retry
    assert s.successes == 9 and stats.actors_lost == 2 and stats.gave_up == [3] and list(stats.reruns) == [3]


def alive(pids):
    import psutil

    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_a_warm_engine_keeps_its_actors_and_envs_across_calls(ray_local, tmp_path):
    from aworld_gym.rollout.engines.ray_engine import RayEngine
    from aworld_gym.rollout.stream import stream
    from tests.helpers import wait_until

    kw = demo_env_kwargs(4)
    with RayEngine(concurrency=4, actors=2) as engine:
        pids = engine.pool.pids()
        made = []
        for step in range(3):  # a trainer's steps: one collect per step on the same engine
            s = collect(ENV, PlanPolicy, episodes=8, group_size=2, seed=step, engine=engine, env_kwargs=kw,
                        progress=False)  # fmt: skip
            assert (s.recorded, s.successes) == (8, 8) and engine.last_run.batches >= 2
            made.append(sum(i["envs_made"] for i in engine.pool.info()))
        assert made[0] == made[1] == made[2] <= 4  # the envs of the first call served every later one
        with stream(ENV, PlanPolicy, episodes=12, engine=engine, env_kwargs=kw) as it:  # left after 2 records
            assert [next(it).status for _ in range(2)] == ["ok", "ok"]
        assert wait_until(lambda: all(i["running"] == 0 for i in engine.pool.info()), 30)  # the rest was cancelled
        s = collect(ENV, PlanPolicy, episodes=6, engine=engine, env_kwargs=kw, progress=False)
        assert (s.recorded, s.successes, engine.last_run.duplicates) == (6, 6, 0)  # nothing of the cancelled run
        assert engine.pool.pids() == pids  # no actor was started after the first
        actors = [p for ps in pids.values() for p in ps]
    assert not engine.warm and wait_until(lambda: not alive(actors), 30)  # closed: every actor process is gone


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
