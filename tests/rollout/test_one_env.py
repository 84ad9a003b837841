"""One shaping wrapper, every face: its components appear identically through step, collect (in-process and Ray)
and RayVectorEnv (the TRL adapters: tests/trainers/test_trl.py; the verl loop: tests/trainers/test_verl.py)."""

import json
import os

import pytest

from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.driver import run_episode
from aworld_gym.rollout.policies.plan import PlanPolicy
from tests.helpers import SHAPED, shaped_env


def test_step_face():
    env = shaped_env()
    record = run_episode(env, PlanPolicy(), env_id="shaped", options={"task_index": 1})
    env.close()
    assert record["reward_components"] == SHAPED and record["reward"] == 11.0
    assert record["turns"][-1]["reward_components"] == SHAPED


@pytest.mark.parametrize("engine", ["async", "ray"])
def test_collect_faces(engine, tmp_path):
    if engine == "ray":
        ray = pytest.importorskip("ray")
        os.environ["RAY_AUTH_MODE"] = "disabled"
        ray.init(address="local", include_dashboard=False, log_to_driver=False, num_cpus=2)
    try:
        out = tmp_path / "s.jsonl"
        s = collect(shaped_env, PlanPolicy, episodes=4, concurrency=2, engine=engine, sink=out, progress=False)
    finally:
        if engine == "ray":
            ray.shutdown()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert s.recorded == 4 and s.env_id == "AWorld/MCP-v0"
    assert all(r["reward_components"] == SHAPED and r["reward"] == 11.0 for r in rows)
    assert all(r["turns"][-1]["reward_components"] == SHAPED for r in rows)


def test_ray_vector_env_face():
    ray = pytest.importorskip("ray")
    from aworld_gym.rollout.engines.ray_vector import RayVectorEnv

    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(address="local", include_dashboard=False, log_to_driver=False, num_cpus=2)
    envs = RayVectorEnv(2, shaped_env)
    try:
        envs.reset(seed=0, options={"task_index": 2})
        call = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 1}}</tool_call>'
        envs.step([call, call])
        obs, rewards, terms, truncs, infos = envs.step(["<answer>3.0</answer>"] * 2)
        assert list(rewards) == [11.0, 11.0] and terms.all()
        comps = infos["reward_components"]  # Gymnasium batches a dict info into a dict of arrays
        assert {k: list(v) for k, v in comps.items() if not k.startswith("_")} == {k: [v, v] for k, v in SHAPED.items()}
    finally:
        envs.close()
        ray.shutdown()
