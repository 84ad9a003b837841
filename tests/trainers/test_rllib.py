"""RLlib: ids registered with Ray Tune, and RLlib's own PPO training on an AWorld env through MenuActions."""

from __future__ import annotations

import json

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from aworld_gym.fixtures.toy import TOOL_MENU, learning_criterion, tool_choice_env_kwargs  # noqa: E402
from aworld_gym.trainers.rllib import MenuActions, make_env, register_all  # noqa: E402


def tool_call(name: str, a: int, b: int) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': {'a': a, 'b': b}})}</tool_call>"


MENU = [tool_call("multiply", 3, 4), tool_call("add", 3, 4), "<answer>12</answer>", "<answer>7</answer>"]
FIXED = {"ops": ("multiply",), "pairs": ((3, 4),)}  # the small fixed task set of the plumbing tests


def test_register_all_registers_every_id():
    from ray.tune.registry import ENV_CREATOR, _global_registry

    import aworld_gym

    ids = register_all()
    assert ids == list(aworld_gym.ENV_IDS) and "AWorld/Browser-v0" in ids
    assert all(_global_registry.contains(ENV_CREATOR, i) for i in ids)


def test_menu_actions_give_numeric_spaces_and_the_envs_rewards():
    env = make_env("AWorld/MCP-v0", {**tool_choice_env_kwargs(**FIXED), "menu": MENU, "obs_tokens": 64})
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


def test_menu_entries_may_read_the_question_and_the_last_result():
    env = make_env("AWorld/MCP-v0", {**tool_choice_env_kwargs("validation"), "menu": TOOL_MENU, "obs_tokens": 32})
    try:
        for task in env.unwrapped.tasks:
            env.reset(options={"task_id": task.id})
            _, reward, terminated, _, info = env.step(TOOLS.index(task.metadata["tool"]))
            assert (
                not terminated
                and info["tool_calls"][0]["arguments"] == task.metadata["reference"]["turns"][0][0]["arguments"]
            )
            _, reward, terminated, _, info = env.step(3)  # answer with the tool's result
            assert terminated and reward == 1.0, task.id
        wrong = next(t for t in env.unwrapped.tasks if t.metadata["tool"] == "add")
        env.reset(options={"task_id": wrong.id})
        env.step(TOOLS.index("multiply"))
        assert env.step(3)[1] == 0.0  # the wrong tool's result is a wrong answer
    finally:
        env.close()


TOOLS = ["add", "multiply", "lookup"]  # TOOL_MENU's first three actions


def sample_successes(module, episodes: int, seed: int) -> list[bool]:
    """Held-out episodes with actions sampled from the policy (independent episodes: the criterion's premise)."""
    import torch

    rng = np.random.default_rng(seed)
    env = make_env("AWorld/MCP-v0", {**tool_choice_env_kwargs("validation", max_turns=2), "menu": TOOL_MENU,
                                     "obs_tokens": 32})  # fmt: skip
    tasks = env.unwrapped.tasks
    out = []
    try:
        for i in range(episodes):
            obs, _ = env.reset(options={"task_id": tasks[i % len(tasks)].id})
            done, reward = False, 0.0
            while not done:
                with torch.no_grad():
                    logits = module.forward_inference({"obs": torch.from_numpy(obs[None])})["action_dist_inputs"][0]
                probs = torch.softmax(logits, -1).numpy().astype(np.float64)
                obs, reward, terminated, truncated, _ = env.step(int(rng.choice(len(probs), p=probs / probs.sum())))
                done = terminated or truncated
            out.append(reward >= 1.0)
    finally:
        env.close()
    return out


def ppo_run(lr: float, iterations: int = 8) -> tuple[bool, float, list[bool], list[bool]]:
    """PPO on the train split; held-out successes before and after; the learning criterion."""
    from ray.rllib.algorithms.ppo import PPOConfig

    env_config = {**tool_choice_env_kwargs("train", max_turns=2), "menu": TOOL_MENU, "obs_tokens": 32}
    config = (
        PPOConfig()
        .environment("AWorld/MCP-v0", env_config=env_config)
        .env_runners(num_env_runners=0, rollout_fragment_length=64)
        .learners(num_learners=0)
        .training(train_batch_size_per_learner=128, minibatch_size=64, num_epochs=4, lr=lr)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        before = sample_successes(algo.get_module(), 144, seed=1)
        for _ in range(iterations):
            algo.train()
        after = sample_successes(algo.get_module(), 144, seed=2)
    finally:
        algo.stop()
    passed, p = learning_criterion(before, after)
    return passed, p, before, after


def test_rllib_ppo_learns_the_tool_choice_on_held_out_tasks():
    """PPO trained on the train split solves held-out tasks (other numbers and keys) it never saw, by the
    pre-registered criterion (one-sided Fisher exact test, p <= 0.01: a policy that did not learn passes with
    probability at most 1%); the control, the same run with learning rate 0, must not pass it."""
    ray.init(address="local", include_dashboard=False, num_cpus=2, ignore_reinit_error=True)
    try:
        register_all()
        passed, p, before, after = ppo_run(lr=3e-3)
        control, p0, before0, after0 = ppo_run(lr=0.0)
    finally:
        ray.shutdown()
    print(f"PPO held-out success: {sum(before)}/144 -> {sum(after)}/144 (p={p:.2g}); "
          f"control {sum(before0)}/144 -> {sum(after0)}/144 (p={p0:.2g})")  # fmt: skip
    assert passed, (sum(before), sum(after), p)
    assert not control, (sum(before0), sum(after0), p0)


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
