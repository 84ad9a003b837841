"""SkyRL: AWorld ids through skyrl-gym's own registry and ``make``, driven turn by turn as SkyRL's generator does."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import gymnasium as gym
import pytest

skyrl_gym = pytest.importorskip("skyrl_gym")

import aworld_gym  # noqa: E402, F401
from aworld_gym.base.errors import ConfigError  # noqa: E402
from aworld_gym.rollout.driver import run_episode  # noqa: E402
from aworld_gym.trainers.skyrl import AWorldGenerator, AWorldTextEnv, register_all  # noqa: E402
from tests.helpers import ANSWER, CALL, CRASH, TextScript, demo_env_kwargs  # noqa: E402


def generator_loop(env, texts):
    """What SkyRL's generator does with an env: init, then step with each model turn until done."""
    chat, _ = env.init([{"role": "user", "content": "unused"}])
    rewards, outputs = [], []
    for text in texts:
        out = env.step(text)
        rewards.append(out["reward"])
        outputs.append(out)
        chat += [{"role": "assistant", "content": text}, *out["observations"]]
        if out["done"]:
            break
    metrics = env.get_metrics()
    env.close()
    return chat, rewards, outputs, metrics


def test_every_id_through_skyrl_gyms_registry_gives_the_drivers_trajectory():
    ids = register_all()
    assert "aworld" in ids and "AWorld/MCP-v0" in ids and "AWorld/MCP-v0" in skyrl_gym.registry
    assert register_all() == ids  # idempotent
    kwargs = demo_env_kwargs(4)
    env = skyrl_gym.make("AWorld/MCP-v0", env_config={"env_kwargs": kwargs}, extras={"task_id": "add-2"})
    assert isinstance(env, AWorldTextEnv)
    chat, rewards, outputs, metrics = generator_loop(env, [CALL, ANSWER])
    assert chat[0]["role"] == "system" and "add" in chat[0]["content"] and "2 + 1" in chat[1]["content"]
    assert outputs[0]["observations"][0]["role"] == "tool" and outputs[0]["observations"][0]["content"] == "3.0"
    assert [o["done"] for o in outputs] == [False, True] and outputs[-1]["metadata"]["status"] == "ok"
    assert metrics["void"] == 0.0 and metrics["score"] == 1.0
    # its parse health, which SkyRL averages over the batch: one of its two turns called a tool
    assert metrics["parse/tool_call_turns"] == 0.5 and metrics["parse/no_tool_call_episodes"] == 0.0
    assert metrics["parse/failure_turns"] == 0.0 and metrics["parse/unknown_tools"] == 0.0

    plain = gym.make("AWorld/MCP-v0", **kwargs)
    try:
        direct = run_episode(plain, TextScript([CALL, ANSWER]), options={"task_id": "add-2"})
    finally:
        plain.close()
    traj = env.trajectory
    assert rewards == [t["reward"] for t in direct.turns] and traj.reward == direct.reward == 1.0
    same = ("turn", "action", "tool_calls", "observation", "reward", "reward_components")
    assert [{k: t[k] for k in same} for t in traj.turns] == [{k: t[k] for k in same} for t in direct.turns]
    assert traj.status == direct.status and traj.termination == direct.termination == "answer"


def test_the_generic_id_takes_the_env_from_the_row_and_bad_config_is_clear():
    register_all()
    env = skyrl_gym.make("aworld", env_config={"max_turns": 2},
                         extras={"env_id": "AWorld/MCP-v0", "env_kwargs": demo_env_kwargs(4),
                                 "extra_info": {"task_index": 1}})  # fmt: skip
    _, rewards, outputs, _ = generator_loop(env, [CALL, CALL, CALL])
    assert len(outputs) == 2 and outputs[-1]["metadata"]["termination"] == "turn_limit"
    assert outputs[-1]["metadata"]["status"] == "failed"
    with pytest.raises(ConfigError, match="env_id"):
        skyrl_gym.make("aworld", env_config={}, extras={})


class Generator:
    """A stand-in for SkyRL's generator: each row an env of the registry driven by :func:`generator_loop` (row i with
    the model turns ``scripts[i]``), its ``GeneratorOutput`` built as SkyRL's is (the step rewards summed, a loss mask
    of 1s, the env's metrics, one group)."""

    def __init__(self, env_kwargs, scripts, loss_mask=(1, 1, 0, 1)):
        self.env_kwargs, self.scripts, self.loss_mask = env_kwargs, scripts, list(loss_mask)
        self.outputs = []

    async def generate(self, input_batch):
        rows = []
        for script in self.scripts:
            env = skyrl_gym.make(
                "AWorld/MCP-v0", env_config={"env_kwargs": self.env_kwargs}, extras={"task_id": "add-2"}
            )
            _, rewards, outputs, metrics = await asyncio.to_thread(generator_loop, env, script)  # SkyRL's env executor
            self.outputs.append(outputs)
            rows.append((sum(rewards), metrics))
        return {
            "rewards": [r for r, _ in rows],
            "loss_masks": [list(self.loss_mask) for _ in rows],
            "env_metrics": [m for _, m in rows],
            "trajectory_ids": [SimpleNamespace(instance_id="add-2", repetition_id=i) for i in range(len(rows))],
        }


def test_a_server_killed_mid_episode_is_void_and_masked_in_the_generator_output():
    """Through AWorldGenerator (SkyRL's generator wrapped): a void row is masked and given its group's live mean.
    Before, nothing called the masking: the void rows trained as reward 0 with their loss mask on."""
    register_all()
    inner = Generator(demo_env_kwargs(4, "stdio"), [[first, ANSWER] for first in [CALL, CRASH, CALL, CRASH]])
    output = asyncio.run(AWorldGenerator(inner).generate({}))
    ends = [outputs[-1]["metadata"] for outputs in inner.outputs]
    assert [m["status"] for m in ends] == ["ok", "void"] * 2
    assert [m["termination"] for m in ends] == ["answer", "env_crash"] * 2
    assert [len(o) for o in inner.outputs] == [2, 1, 2, 1]  # the crash ends the episode at once
    assert output["loss_masks"] == [[1, 1, 0, 1], [0, 0, 0, 0], [1, 1, 0, 1], [0, 0, 0, 0]]
    assert output["rewards"] == [1.0, 1.0, 1.0, 1.0]  # the void rows get the live rows' mean
