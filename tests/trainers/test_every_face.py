"""One shared test over every face in this venv (runner, TRL, SkyRL, slime, OpenRLHF, AReaL, the OpenEnv server,
RLlib): the same task (add-2 on the demo server), the same scripted turns and seed give the same reward through
each, and each token-exact face the same ids and mask as the driver's token mode; the env's group hook (a 0.5 bonus)
reaches each GRPO face's output; a server killed mid-episode is masked on each.

verl and ms-swift, in venvs of their own, are checked against the same reference there: tests/trainers/test_verl.py
(``test_the_same_trajectory_as_the_drivers_token_mode``, ``test_a_group_hooks_known_bonus_reaches_verls_reward_score``,
``test_a_server_killed_mid_episode_is_masked_in_its_group``) and test_swift.py
(``test_the_scheduler_is_token_exact_and_matches_the_driver_on_both_of_swifts_loops``,
``test_the_envs_group_hooks_reach_what_swift_trains_on``, ``test_void_episodes_are_masked_and_get_their_groups_live_mean``
and the gym env's). RLlib trains PPO on env steps, not GRPO groups: it has no group case, and a void episode there
ends truncated with ``status`` void (RLlib bootstraps it instead of scoring a terminal 0)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

pytest.importorskip("trl")
from transformers import AutoTokenizer

from aworld_gym.rollout.tokens import ChatTokens
from tests.helpers import ANSWER, CALL, CRASH, TextScript, demo_env_kwargs, scripted_tokens

PROMPT = "What is 2 + 1? Use the add tool."


def engine_task(script) -> str:
    """The task for the faces whose stand-in engines script the model themselves (slime, OpenRLHF, AReaL): they call
    the crash tool first on task add-3, and answer add-2 with the add tool."""
    return "add-3" if script[0] == CRASH else "add-2"


def via_runner(tok, kwargs, script=(CALL, ANSWER)):
    from aworld_gym.rollout.stream import stream

    one = {**kwargs, "tasks": kwargs["tasks"][2:3]}
    with stream("AWorld/MCP-v0", TextScript(list(script)), episodes=1, env_kwargs=one) as s:
        (traj,) = list(s)
    return traj.reward, None, traj.weight


def via_trl(tok, kwargs, script=(CALL, ANSWER)):
    from aworld_gym.trainers.trl import make_rollout_func
    from tests.trainers.test_training_v2 import scripted

    rf = make_rollout_func("AWorld/MCP-v0", generate=scripted(ChatTokens(tok), list(script)), **kwargs)
    try:
        out = rf(
            [[{"role": "user", "content": PROMPT}]],
            SimpleNamespace(processing_class=tok, max_completion_length=400, accelerator=None),
        )
    finally:
        rf.close()
    return (
        out["reward"][0],
        (out["prompt_ids"][0], out["completion_ids"][0], out["env_mask"][0]),
        sum(out["env_mask"][0]),
    )


def via_skyrl(tok, kwargs, script=(CALL, ANSWER)):
    pytest.importorskip("skyrl_gym")

    from aworld_gym.trainers.skyrl import AWorldGenerator, register_all
    from tests.trainers.test_skyrl import Generator

    register_all()
    out = asyncio.run(AWorldGenerator(Generator(kwargs, [list(script)])).generate({}))
    return out["rewards"][0], None, sum(out["loss_masks"][0])  # SkyRL's generator tokenizes the chat itself


def via_slime(tok, kwargs, tiny, script=(CALL, ANSWER)):
    from aworld_gym.trainers.slime import generate
    from tests.trainers.test_slime import Sample, SGLang, args_for

    with SGLang(ChatTokens(tok)) as server:
        s = asyncio.run(generate(args_for(server, tiny, kwargs), Sample(metadata={"task_id": engine_task(script)}), {}))
    n = len(s.tokens) - s.response_length
    return s.reward, (s.tokens[:n], s.tokens[n:], s.loss_mask), sum(s.loss_mask)


def via_openrlhf(tok, kwargs, script=(CALL, ANSWER)):
    pytest.importorskip("openrlhf")
    from aworld_gym.trainers.openrlhf import AgentExecutor
    from tests.trainers.test_openrlhf import Engine, params

    label = {"env_id": "AWorld/MCP-v0", "env_kwargs": kwargs, "task_id": engine_task(script)}
    out = asyncio.run(AgentExecutor().execute(PROMPT, label, params(400), 2048, tok, Engine(ChatTokens(tok))))
    if not out["action_ranges"]:  # nothing of the episode is trained on
        return out["reward"], None, 0
    first = out["action_ranges"][0][0]
    mask = [0] * (len(out["observation_tokens"]) - first)
    for start, end in out["action_ranges"]:
        mask[start - first : end - first] = [1] * (end - start)
    return out["reward"], (out["observation_tokens"][:first], out["observation_tokens"][first:], mask), sum(mask)


def via_areal(tok, kwargs, script=(CALL, ANSWER)):
    pytest.importorskip("areal.api.workflow_api")
    from areal.api.cli_args import GenerationHyperparameters

    from aworld_gym.trainers.areal import AWorldWorkflow
    from tests.trainers.test_areal import Engine

    flow = AWorldWorkflow(GenerationHyperparameters(max_new_tokens=400, max_tokens=2048), tok, "AWorld/MCP-v0", kwargs)
    out = asyncio.run(flow.arun_episode(Engine(ChatTokens(tok)), {"task_id": engine_task(script)}))
    if out is None:  # rejected: AReaL leaves a void episode out of training
        return 0.0, None, 0
    ids, mask = out["input_ids"][0].tolist(), out["loss_mask"][0].tolist()
    n = mask.index(1)
    return out["rewards"].item(), (ids[:n], ids[n:], mask[n:]), sum(mask)


def via_rllib(tok, kwargs, script=(CALL, ANSWER)):
    from aworld_gym.trainers.rllib import make_env

    env = make_env("AWorld/MCP-v0", {**kwargs, "menu": list(script), "obs_tokens": 16})  # action k: the k-th text
    try:
        env.reset(seed=0, options={"task_id": "add-2"})
        steps = []
        for k in range(len(script)):
            steps.append(env.step(k))
            if steps[-1][2] or steps[-1][3]:
                break
    finally:
        env.close()
    return sum(s[1] for s in steps), None, steps  # RLlib's model reads numbers: no token ids to compare


def via_openenv(tok, kwargs):
    from tests.trainers.test_openenv import OPENENV_PY, in_process, openenv_client

    if not OPENENV_PY.exists():
        pytest.skip("needs .venv-swift (OpenEnv's client; make test builds it)")
    with in_process(env_kwargs=kwargs) as (address, _):
        plan = [{"reset": {"task_id": "add-2"}, "actions": [CALL, ANSWER]}]
        (episode,) = openenv_client(f"http://{address}", plan)["episodes"]
    assert episode["steps"][-1]["status"] == "ok"
    return sum(s["reward"] for s in episode["steps"]), None, None  # the client's model tokenizes the chat itself


@pytest.mark.parametrize("face", ["runner", "trl", "skyrl", "slime", "openrlhf", "areal", "openenv", "rllib"])
def test_every_face_gives_the_drivers_episode(face, tiny):
    tok = AutoTokenizer.from_pretrained(tiny)
    kwargs = demo_env_kwargs(4)
    reference = scripted_tokens(ChatTokens(tok), [CALL, ANSWER], "add-2", kwargs)
    faces = {"runner": via_runner, "trl": via_trl, "skyrl": via_skyrl, "openrlhf": via_openrlhf, "areal": via_areal,
             "openenv": via_openenv, "rllib": via_rllib}  # fmt: skip
    run = faces.get(face)
    reward, tokens, _ = run(tok, kwargs) if run is not None else via_slime(tok, kwargs, tiny)
    assert reward == reference.reward == 1.0
    if tokens is not None:
        ref = reference.tokens
        assert tokens == (ref.prompt_ids, ref.completion_ids, ref.mask)


def group_bonus(group: list[dict]) -> list[float]:
    """A group reward hook that adds a known bonus (0.5) to each live member."""
    return [0.5] * len(group)


GROUP_FACES = ["runner", "trl", "skyrl", "slime", "openrlhf", "areal"]


@pytest.mark.parametrize("face", GROUP_FACES)
def test_every_face_runs_the_envs_group_hooks(face, tiny):
    """The env's group hook (a 0.5 bonus) reaches each face's output: the solved episode's reward is 1.5, not 1.0.
    (AReaL, SkyRL and ms-swift never ran them; ms-swift's and verl's are checked in their venvs; the OpenEnv server
    and RLlib have no groups: OpenEnv's clients hold them, RLlib trains PPO.)"""
    from aworld_gym.core.rewards import Hook, default_hooks

    tok = AutoTokenizer.from_pretrained(tiny)
    kwargs = {**demo_env_kwargs(4), "reward_hooks": [*default_hooks(), Hook(group_bonus, on="group")]}
    faces = {"runner": via_runner, "trl": via_trl, "skyrl": via_skyrl, "openrlhf": via_openrlhf, "areal": via_areal}
    run = faces.get(face)
    if face == "runner":  # the runner has groups only with group_size > 1 (a single episode is no GRPO group)
        from aworld_gym.rollout.stream import stream

        one = {**kwargs, "tasks": kwargs["tasks"][2:3]}
        with stream("AWorld/MCP-v0", TextScript([CALL, ANSWER]), episodes=2, group_size=2, env_kwargs=one) as s:
            rewards = [t.reward for t in s]
        assert rewards == [1.5, 1.5]
        return
    reward, _, _ = run(tok, kwargs) if run is not None else via_slime(tok, kwargs, tiny)
    assert reward == 1.5


@pytest.mark.parametrize("face", [*GROUP_FACES, "rllib"])
def test_every_face_masks_an_episode_whose_server_is_killed(face, tiny):
    """The demo server's crash tool ends its process mid-episode: a void episode, which each face leaves out of
    training (nothing of it trainable: loss mask 0, or rejected) with a reward of 0 (a group of one: no live mean).
    SkyRL's rows kept their loss mask before AWorldGenerator."""
    tok = AutoTokenizer.from_pretrained(tiny)
    kwargs = demo_env_kwargs(4, "stdio")
    faces = {"runner": via_runner, "trl": via_trl, "skyrl": via_skyrl, "openrlhf": via_openrlhf, "areal": via_areal}
    run = faces.get(face)
    script = (CRASH, ANSWER)
    if face == "rllib":  # no loss mask: the episode ends truncated (bootstrapped, not a terminal 0), marked void
        *_, (_, _, terminated, truncated, info) = via_rllib(tok, kwargs, script)[2]
        assert truncated and not terminated and info["status"] == "void"
        return
    reward, _, trained = run(tok, kwargs, script) if run is not None else via_slime(tok, kwargs, tiny, script)
    assert (reward, trained) == (0.0, 0)
