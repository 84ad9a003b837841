"""RLlib: ids registered with Ray Tune, and RLlib's own PPO training on an AWorld env through MenuActions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from aworld_gym.fixtures.learning import pin_kernels

pin_kernels()  # before torch is imported (RLlib imports it)
ray = pytest.importorskip("ray")

from aworld_gym.fixtures.rllib_learning import RECIPE, experiment, shuffled_rewards  # noqa: E402
from aworld_gym.fixtures.toy import TOOL_MENU, tool_choice_env_kwargs  # noqa: E402
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


@pytest.fixture(scope="module")
def ray_local():
    ray.init(address="local", include_dashboard=False, num_cpus=2, ignore_reinit_error=True)
    register_all()
    yield
    ray.shutdown()


def test_shuffled_rewards_permute_the_returns_of_the_batchs_episode_chunks():
    """The shuffled control's learner connector: each chunk's return goes, whole, to the last real step of a chunk
    picked by a seeded permutation; the batch's returns are kept as a multiset; the bootstrap step's 0 is kept."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode
    from ray.rllib.utils.postprocessing.episodes import add_one_ts_to_episodes_and_truncate

    rewards = [[0.0, 1.0], [0.0, 0.0], [0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 1.0]]

    def chunks():
        eps = []
        for i, r in enumerate(rewards):
            obs = [np.full(2, i, np.float32) for _ in range(len(r) + 1)]
            ep = SingleAgentEpisode(observations=obs, actions=[0] * len(r), rewards=list(r), infos=[{}] * (len(r) + 1),
                                    terminated=True, len_lookback_buffer=0)  # fmt: skip
            ep.to_numpy()
            add_one_ts_to_episodes_and_truncate([ep])  # what PPO's learner does before custom pieces
            eps.append(ep)
        return eps

    piece = shuffled_rewards(seed=0)(None, None)
    with pytest.raises(RuntimeError, match="after AddOneTs"):
        piece(rl_module=None, batch={}, episodes=chunks(), shared_data={})
    seen = set()
    for _ in range(20):
        eps = chunks()
        piece(rl_module=None, batch={}, episodes=eps, shared_data={"_added_loss_mask_for_valid_episode_ts": True})
        got = [list(e.get_rewards()) for e in eps]
        assert all(len(g) == len(r) + 1 and g[-1] == 0.0 and not any(g[:-2]) for g, r in zip(got, rewards, strict=True))
        returns = [sum(g) for g in got]
        assert sorted(returns) == sorted(map(sum, rewards))
        seen.add(tuple(returns))
    assert len(seen) > 5  # a new permutation per batch
    again = shuffled_rewards(seed=0)(None, None)
    eps = chunks()
    again(rl_module=None, batch={}, episodes=eps, shared_data={"_added_loss_mask_for_valid_episode_ts": True})
    first = shuffled_rewards(seed=0)(None, None)
    eps2 = chunks()
    first(rl_module=None, batch={}, episodes=eps2, shared_data={"_added_loss_mask_for_valid_episode_ts": True})
    assert [list(e.get_rewards()) for e in eps] == [list(e.get_rewards()) for e in eps2]  # seeded


@pytest.mark.timeout(900)  # three PPO runs (26 iterations) and 576 sampled episodes: about 100 s on 2 cores
@pytest.mark.parametrize("seed", RECIPE["seeds"])
def test_rllib_ppo_learns_the_tool_choice_on_held_out_tasks(ray_local, seed):
    """PPO trained on the train split (:data:`aworld_gym.fixtures.rllib_learning.RECIPE`, frozen) solves tasks of
    the evaluation split (the test split: other operands, keys and wordings, never used to tune the recipe) by the
    pre-registered criterion (one-sided Fisher exact test on 144 sampled episodes before and after, p <= 0.01: a
    policy that did not learn passes with probability at most 1%). Two controls must not pass it:

    - shuffled rewards: the same run (same learning rate, same updates) with each train batch's episode returns
      permuted among its episodes: the rewards' amount is kept, which episode earned them is lost, so passing
      takes learning *from the reward*, not from taking steps at this learning rate;
    - learning rate 0: PPO's loop ran (module steps trained every iteration) and not one weight of the learner's
      or the env runner's module moved, bit for bit (asserted), so it rules out sampling noise alone.

    The three runs start from the same module (asserted), so they share the "before" episodes."""
    out = experiment(seeds=[seed])
    (row,) = out["seeds"]
    assert out["split"] == "test"
    assert row["trained"]["passed"], row["trained"]
    assert not row["shuffled"]["passed"], row["shuffled"]
    assert not row["lr0"]["passed"], row["lr0"]
    assert row["lr0"]["tensors_moved"] == 0 and row["trained"]["tensors_moved"] > 0


def test_void_episodes_are_marked_and_counted_with_the_episodes_parse_health():
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    from aworld_gym.trainers.rllib import void_metrics
    from tests.helpers import demo_env_kwargs

    crash = '<tool_call>{"name": "crash", "arguments": {}}</tool_call>'
    malformed = "<tool_call>{name: add}</tool_call>"
    unknown = '<tool_call>{"name": "subtract", "arguments": {}}</tool_call>'
    env = make_env("AWorld/MCP-v0", {**demo_env_kwargs(2, "stdio"), "menu": [crash, malformed, unknown],
                                     "obs_tokens": 16})  # fmt: skip
    try:
        obs, info = env.reset(options={"task_index": 0})
        infos = [info] + [env.step(a)[4] for a in (1, 2)]
        obs2, reward, terminated, truncated, info = env.step(0)  # the server process exits mid-episode
        infos.append(info)
    finally:
        env.close()
    assert truncated and not terminated and info["truncation_reason"] == "env_crash" and info["status"] == "void"
    assert "invalid JSON" in infos[1]["parse_errors"][0] and "parse_errors" not in infos[2]
    callback, logger = void_metrics()(), MetricsLogger()
    for steps in (infos, [{}, {"tool_calls": [], "truncation_reason": "turn_limit"}]):
        episode = SingleAgentEpisode(observations=[obs] * len(steps), infos=steps, actions=[0] * (len(steps) - 1),
                                     rewards=[reward] * (len(steps) - 1), truncated=True, len_lookback_buffer=0)  # fmt: skip
        callback.on_episode_end(episode=episode, metrics_logger=logger, env_index=0)
    out = logger.reduce()
    assert out["void/rate"].peek() == 0.5 and out["void/env_crash"].peek() == 1.0
    # the first episode: 3 turns, 2 with a tool call (the unknown one counts), 1 that failed to parse; the second
    # called no tool
    assert out["parse/tool_call_turns"].peek() == pytest.approx((2 / 3 + 0) / 2)
    assert out["parse/failure_turns"].peek() == pytest.approx((1 / 3 + 0) / 2)
    assert out["parse/no_tool_call_episodes"].peek() == 0.5 and out["parse/unknown_tools"].peek() == 1.0
