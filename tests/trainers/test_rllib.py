"""RLlib: ids registered with Ray Tune, and RLlib's own PPO training on an AWorld env through MenuActions."""

from __future__ import annotations

import json

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from aworld_gym.trainers.rllib import MenuActions, make_env, register_all  # noqa: E402
from aworld_gym.trainers.toy import tool_choice_env_kwargs  # noqa: E402


def tool_call(name: str, a: int, b: int) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': {'a': a, 'b': b}})}</tool_call>"


MENU = [tool_call("multiply", 3, 4), tool_call("add", 3, 4), "<answer>12</answer>", "<answer>7</answer>"]


def test_register_all_registers_every_id():
    from ray.tune.registry import ENV_CREATOR, _global_registry

    import aworld_gym

    ids = register_all()
    assert ids == list(aworld_gym.ENV_IDS) and "AWorld/Browser-v0" in ids
    assert all(_global_registry.contains(ENV_CREATOR, i) for i in ids)


def test_menu_actions_give_numeric_spaces_and_the_envs_rewards():
    env = make_env("AWorld/MCP-v0", {**tool_choice_env_kwargs(), "menu": MENU, "obs_tokens": 64})
    try:
        assert isinstance(env, MenuActions) and env.action_space.n == 4
        obs, _ = env.reset(seed=0)
        assert obs.shape == (64,) and obs.dtype == np.float32 and env.observation_space.contains(obs)
        assert obs[-1] != 0 and obs.max() <= 256
        obs, reward, terminated, _, info = env.step(0)  # the multiply call
        assert not terminated and "12" in info["tool_results"][0]["text"]
        obs, reward, terminated, _, info = env.step(2)  # answer 12
        assert terminated and info["score"] == 1.0 and reward == pytest.approx(1.0)
    finally:
        env.close()


def test_rllib_ppo_learns_on_an_aworld_env():
    from ray.rllib.algorithms.ppo import PPOConfig

    ray.init(address="local", include_dashboard=False, num_cpus=2, ignore_reinit_error=True)
    env_config = {**tool_choice_env_kwargs(max_turns=2), "menu": MENU, "obs_tokens": 32}
    try:
        register_all()
        config = (
            PPOConfig()
            .environment("AWorld/MCP-v0", env_config=env_config)
            .env_runners(num_env_runners=0, rollout_fragment_length=64)
            .learners(num_learners=0)
            .training(train_batch_size_per_learner=128, minibatch_size=64, num_epochs=4, lr=3e-3)
            .debugging(seed=0)
        )
        algo = config.build_algo()
        means = []
        try:
            for _ in range(6):
                result = algo.train()
                means.append(result["env_runners"]["episode_return_mean"])
        finally:
            algo.stop()
        print("PPO episode_return_mean per iteration:", [round(m, 3) for m in means])
        assert all(np.isfinite(means))
        assert max(means[-2:]) > means[0]  # it improves on a random menu policy
    finally:
        ray.shutdown()


def test_void_episodes_are_marked_and_counted():
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    from aworld_gym.trainers.rllib import void_metrics
    from tests.helpers import demo_env_kwargs

    crash = '<tool_call>{"name": "crash", "arguments": {}}</tool_call>'
    env = make_env("AWorld/MCP-v0", {**demo_env_kwargs(2, "stdio"), "menu": [crash], "obs_tokens": 16})
    try:
        obs, info = env.reset(options={"task_index": 0})
        obs2, reward, terminated, truncated, info = env.step(0)  # the server process exits mid-episode
    finally:
        env.close()
    assert truncated and not terminated and info["truncation_reason"] == "env_crash" and info["status"] == "void"
    callback, logger = void_metrics()(), MetricsLogger()
    for infos in ([{}, info], [{}, {"truncation_reason": "turn_limit"}]):
        episode = SingleAgentEpisode(observations=[obs, obs2], infos=infos, actions=[0], rewards=[reward],
                                     truncated=True)  # fmt: skip
        callback.on_episode_end(episode=episode, metrics_logger=logger, env_index=0)
    out = logger.reduce()
    assert out["void/rate"].peek() == 0.5 and out["void/env_crash"].peek() == 1.0
