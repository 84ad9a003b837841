"""verl's agent loop on CPU: the real verl 0.9 classes (AgentLoopBase, registry, hydra instantiation, AgentLoopOutput)
with a stand-in for the LLM server manager that returns known token ids. Runs in `.venv-verl` (`make test`)."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest

verl = pytest.importorskip("verl")

import hydra  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopBase,
    AgentLoopOutput,
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from aworld_gym.base.errors import ConfigError  # noqa: E402
from aworld_gym.fixtures.tiny_qwen3 import build_tiny_qwen3  # noqa: E402
from aworld_gym.fixtures.toy import tool_choice_env_kwargs  # noqa: E402
from aworld_gym.rollout.tokens import ChatTokens  # noqa: E402
from aworld_gym.trainers import recipes_dir  # noqa: E402
from aworld_gym.trainers.verl import POOL, AWorldAgentLoop  # noqa: E402

CALL = '<tool_call>\n{"name": "multiply", "arguments": {"a": 3, "b": 4}}\n</tool_call>'
ANSWER = "<answer>12</answer>"
FIXED = {"ops": ("multiply",), "pairs": ((3, 4),)}  # the tool-choice env's small fixed task set: multiply 3 and 4
LOGPROB = -0.25


class StandInServer:
    """verl's ``LLMServerClient.generate`` contract (its signature is checked below): token ids in, ``TokenOutput``
    out; scripted replies cut at ``max_tokens``. ``stop_reason`` as verl's vLLM server sets it: ``completed`` for a
    stop and for a cut reply alike, ``aborted`` (no tokens) for a reply scripted as ``None``."""

    def __init__(self, replies: list[list[int] | None]) -> None:
        self.replies = list(replies)
        self.calls: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, video_data=None,
                       audio_data=None, mm_processor_kwargs=None, **kwargs) -> TokenOutput:  # fmt: skip
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), "params": dict(sampling_params)})
        reply = self.replies.pop(0)
        if reply is None:
            return TokenOutput(token_ids=[], log_probs=[], stop_reason="aborted")
        ids = reply[: sampling_params["max_tokens"]]
        return TokenOutput(token_ids=ids, log_probs=[LOGPROB] * len(ids), stop_reason="completed")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return AutoTokenizer.from_pretrained(build_tiny_qwen3(tmp_path_factory.mktemp("tiny") / "qwen3"))


def config(response_length: int = 512):
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": 2048, "response_length": response_length}},
            "data": {"apply_chat_template_kwargs": {}},
        }
    )


def make_loop(tokenizer, server, response_length=512, entry=None) -> AWorldAgentLoop:
    """The loop as verl's AgentLoopWorker builds it: hydra-instantiated from the registry entry."""
    cfg = config(response_length)
    return hydra.utils.instantiate(
        config=entry if entry is not None else _agent_loop_registry["aworld_agent"],
        trainer_config=DictConfigWrap(config=cfg),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="qwen3",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
        tools=ToolListWrap([]),
    )


def ids(tokenizer, text: str) -> list[int]:
    return [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]


def row(**extra) -> dict:
    return {"raw_prompt": [{"role": "user", "content": "unused"}], "extra_info": {"env_id": "AWorld/MCP-v0",
            "env_kwargs": tool_choice_env_kwargs(**FIXED), "task_index": 0, **extra}}  # fmt: skip


def run(loop, **kwargs) -> AgentLoopOutput:
    return asyncio.run(loop.run({"temperature": 1.0}, **kwargs))


def test_registered_under_its_name():
    assert _agent_loop_registry["aworld_agent"]["_target_"] == "aworld_gym.trainers.verl.AWorldAgentLoop"


def test_two_turn_episode_masks_logprobs_reward_and_turns(tokenizer):
    call, answer = ids(tokenizer, CALL), ids(tokenizer, ANSWER)
    server = StandInServer([call, answer])
    out = run(make_loop(tokenizer, server), **row())
    assert isinstance(out, AgentLoopOutput)
    n_env = len(out.response_ids) - len(call) - len(answer)
    assert n_env > 0
    assert out.response_ids[: len(call)] == call and out.response_ids[-len(answer) :] == answer
    assert out.response_mask == [1] * len(call) + [0] * n_env + [1] * len(answer)
    env_text = tokenizer.decode(out.response_ids[len(call) : len(call) + n_env])
    assert "<tool_response>" in env_text and "12" in env_text
    assert out.response_logprobs == [LOGPROB] * len(call) + [0.0] * n_env + [LOGPROB] * len(answer)
    assert out.reward_score == pytest.approx(1.0) and out.extra_fields["score"] == 1.0
    assert out.num_turns == 4 and out.extra_fields["terminated"] is True
    # token-exact: the second generate call continues from exactly the first one's ids plus the env's
    first, second = server.calls
    assert second["prompt_ids"] == first["prompt_ids"] + out.response_ids[: len(call) + n_env]
    assert first["prompt_ids"] == out.prompt_ids
    assert ChatTokens(tokenizer).decode(out.prompt_ids).count("multiply") >= 1  # the env's tools are in the prompt
    # verl's own conversion: the reward sits on the last response token
    d = out.as_dict()
    assert d["rm_scores"][-1].item() == pytest.approx(1.0) and d["rm_scores"][:-1].abs().sum().item() == 0
    assert d["rollout_log_probs"].shape == d["responses"].shape == d["response_mask"].shape


def test_truncation_at_response_length(tokenizer):
    long_turn = ids(tokenizer, "thinking " * 200)
    server = StandInServer([long_turn, long_turn])
    out = run(make_loop(tokenizer, server, response_length=40), **row())
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs) == 40
    assert out.response_mask == [1] * 40 and out.extra_fields["termination"] == "token_budget"
    assert server.calls[0]["params"]["max_tokens"] == 40 and len(server.calls) == 1
    assert out.reward_score == 0.0


def test_the_stand_in_keeps_verls_server_contract():
    """Fails when verl changes ``LLMServerClient.generate`` (what ``AgentLoopBase.server_manager`` is) or the
    ``TokenOutput`` fields the face reads; the face's call binds to the real signature."""
    from verl.workers.rollout.llm_server import LLMServerClient

    from tests.trainers.contract import params

    assert params(StandInServer.generate) == params(LLMServerClient.generate)
    assert inspect.signature(AgentLoopBase.__init__).parameters["server_manager"].annotation in (
        "LLMServerClient", LLMServerClient)  # fmt: skip
    assert {"token_ids", "log_probs", "stop_reason"} <= set(TokenOutput.model_fields)
    assert "stop reason: 'completed', 'aborted', or None" in inspect.getsource(TokenOutput)  # what the face maps
    inspect.signature(LLMServerClient.generate).bind(None, "rid", prompt_ids=[1], sampling_params={"max_tokens": 1})


def test_a_reply_cut_at_max_tokens_ends_with_length(tokenizer):
    """verl's server says ``completed`` for a reply cut at ``max_tokens``: the face still ends the episode with
    ``length`` (no eos, the whole budget used), not a step of half a reply; the cut reply stays trainable."""
    server = StandInServer([ids(tokenizer, "thinking " * 50)])
    out = asyncio.run(make_loop(tokenizer, server).run({"temperature": 1.0, "max_tokens": 8}, **row()))
    assert server.calls[0]["params"]["max_tokens"] == 8 and len(server.calls) == 1
    assert out.extra_fields["termination"] == "length" and out.extra_fields["status"] == "failed"
    assert out.response_mask == [1] * 8 and len(out.response_ids) == 8


def test_an_aborted_generation_is_a_masked_sample_not_a_stepped_turn(tokenizer):
    """``stop_reason="aborted"`` (a weight update, a drained server) ends the episode as ``abort``: void, masked,
    with the group's mean reward; the env is not stepped with the partial reply."""
    server = StandInServer([ids(tokenizer, CALL), None])
    out = run(make_loop(tokenizer, server), **row())
    assert out.extra_fields["termination"] == "abort" and out.extra_fields["status"] == "void"
    assert out.extra_fields["weight"] == 0.0 and sum(out.response_mask) == 0 and len(server.calls) == 2


def test_wrong_answer_and_malformed_output_get_the_envs_rewards(tokenizer):
    server = StandInServer([ids(tokenizer, "<tool_call>not json</tool_call>"), ids(tokenizer, "<answer>13</answer>")])
    out = run(make_loop(tokenizer, server), **row())
    assert out.extra_fields["score"] == 0.0
    assert out.reward_score == pytest.approx(out.extra_fields["reward"]) and out.reward_score < 0  # format penalty
    assert out.num_turns == 4 and out.response_mask.count(0) > 0


def test_env_from_the_agent_loop_yaml(tokenizer, tmp_path):
    """The shipped YAML loads as verl loads it; a custom entry's env_id/env_kwargs reach the loop."""
    shipped = OmegaConf.load(Path(recipes_dir()) / "aworld_agent_loop.yaml")
    assert shipped[0].name == "aworld_agent" and shipped[0].env_id == "AWorld/GAIA-v0"
    (tmp_path / "loops.yaml").write_text(
        "- name: aworld_agent\n  _target_: aworld_gym.trainers.verl.AWorldAgentLoop\n"
        "  env_id: AWorld/MCP-v0\n  env_kwargs:\n    max_turns: 1\n"
    )
    entry = OmegaConf.load(tmp_path / "loops.yaml")[0]
    loop = make_loop(tokenizer, StandInServer([ids(tokenizer, CALL)]), entry=entry)
    assert loop.env_id == "AWorld/MCP-v0" and loop.env_kwargs == {"max_turns": 1}
    extra = {
        "env_kwargs": {k: v for k, v in tool_choice_env_kwargs(**FIXED).items() if k != "max_turns"},
        "task_index": 0,
    }
    out = run(loop, raw_prompt=[], extra_info=extra)
    assert out.extra_fields["env_id"] == "AWorld/MCP-v0"
    assert out.extra_fields["termination"] == "turn_limit" and out.num_turns == 2


def test_envs_are_reused_between_samples(tokenizer):
    async def three() -> list[AgentLoopOutput]:
        loops = [make_loop(tokenizer, StandInServer([ids(tokenizer, CALL), ids(tokenizer, ANSWER)])) for _ in range(3)]
        return [await loop.run({}, **row()) for loop in loops]

    created = POOL.created
    assert [o.reward_score for o in asyncio.run(three())] == pytest.approx([1.0] * 3)
    assert POOL.created - created == 1


def test_a_row_without_an_env_is_a_clear_error(tokenizer):
    with pytest.raises(ConfigError, match=r"needs an env: extra_info\.env_id"):
        run(make_loop(tokenizer, StandInServer([])), raw_prompt=[], extra_info={})


def test_dataset_rows_load_in_verls_rlhf_dataset_and_drive_the_loop(tokenizer, tmp_path):
    from aworld_gym.trainers.verl_data import write_verl_dataset

    kwargs = tool_choice_env_kwargs(**FIXED)
    path = write_verl_dataset("AWorld/MCP-v0", tmp_path / "train.parquet", **kwargs)
    data_cfg = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 1024, "return_raw_chat": True,
                                 "filter_overlong_prompts": False, "truncation": "error"})  # fmt: skip
    dataset = RLHFDataset(data_files=[str(path)], tokenizer=tokenizer, config=data_cfg)
    item = dataset[0]
    assert item["agent_name"] == "aworld_agent" and item["extra_info"]["env_id"] == "AWorld/MCP-v0"
    assert "product of 3 and 4" in item["raw_prompt"][-1]["content"]
    loop = make_loop(tokenizer, StandInServer([ids(tokenizer, CALL), ids(tokenizer, ANSWER)]))
    loop.env_kwargs = kwargs  # the in-process server factory cannot travel through YAML
    out = run(loop, **item)
    assert out.extra_fields["task_id"] == item["extra_info"]["task_id"] and out.reward_score == pytest.approx(1.0)


def test_the_qwen3_32b_recipe_composes_against_verls_config(monkeypatch):
    from hydra import compose, initialize_config_dir
    from verl.utils.config import omega_conf_to_dataclass

    recipes = str(recipes_dir())
    monkeypatch.setenv("AWORLD_GYM_RECIPES", recipes)
    with initialize_config_dir(config_dir=recipes, version_base=None):
        cfg = compose(config_name="qwen3_32b_grpo_verl")
    assert cfg.algorithm.adv_estimator == "aworld_grpo" and cfg.trainer.n_gpus_per_node == 8
    hook = cfg.ray_kwargs.ray_init.runtime_env.worker_process_setup_hook
    assert hook == "aworld_gym.trainers.verl_advantage.register"
    assert omega_conf_to_dataclass(cfg.algorithm).adv_estimator == "aworld_grpo"
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    assert rollout.agent.default_agent_loop == "aworld_agent" and rollout.n == 8
    assert rollout.response_length == cfg.data.max_response_length == 16384
    loops = OmegaConf.load(rollout.agent.agent_loop_config_path)
    assert loops[0].name == "aworld_agent" and loops[0]._target_ == "aworld_gym.trainers.verl.AWorldAgentLoop"


def test_an_env_that_cannot_start_gives_a_masked_sample_not_a_crashed_batch(tokenizer):
    server = StandInServer([])
    out = run(make_loop(tokenizer, server), **row(task_id="no-such-task", task_index=None))
    assert out.reward_score == 0.0 and out.response_mask == [0] and len(out.response_ids) == 1
    assert out.extra_fields["status"] == "void" and out.extra_fields["weight"] == 0.0
    assert "no-such-task" in out.extra_fields["error"] and out.extra_fields["termination"] == "env_error"
    assert server.calls == []  # the model was never asked


def test_one_shaping_wrapper_through_the_verl_loop(tokenizer):
    """An env factory (RewardShaping around the env) from extra_info: the loop steps the outermost env."""
    from tests.helpers import SHAPED

    call = ids(tokenizer, '<tool_call>{"name": "add", "arguments": {"a": 0, "b": 1}}</tool_call>')
    server = StandInServer([call, ids(tokenizer, "<answer>1.0</answer>")])
    extra = {"env_factory": "tests.helpers:shaped_env", "task_id": "add-0"}
    out = run(make_loop(tokenizer, server), raw_prompt=[{"role": "user", "content": "unused"}], extra_info=extra)
    assert out.extra_fields["reward_components"] == SHAPED
    assert out.reward_score == pytest.approx(11.0) and out.extra_fields["env_id"] == "AWorld/MCP-v0"


def test_group_hooks_run_on_the_complete_group(tokenizer):
    """verl runs each sample as its own task; the loop holds a group's samples (same uid) and scores them together."""
    call = ids(tokenizer, '<tool_call>{"name": "add", "arguments": {"a": 0, "b": 1}}</tool_call>')
    right, wrong = ids(tokenizer, "<answer>1.0</answer>"), ids(tokenizer, "<answer>7</answer>")

    class Server(StandInServer):
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            await asyncio.sleep(0.01)
            first = request_id not in self.seen
            self.seen.add(request_id)
            ids_ = call if first else (right if len(self.seen) % 2 else wrong)
            return TokenOutput(token_ids=ids_, log_probs=[LOGPROB] * len(ids_), stop_reason="completed")

    server = Server([])
    server.seen = set()
    extra = {"env_factory": "tests.helpers:grouped_env", "task_id": "add-0"}

    async def main():
        rows = [dict(raw_prompt=[], extra_info=extra, uid="g1") for _ in range(3)]
        rows.append(dict(raw_prompt=[], extra_info={"env_id": "AWorld/Nope-v0"}, uid="g1"))  # fails to start
        tasks = [make_loop(tokenizer, server).run({"temperature": 1.0}, **r) for r in rows]
        return await asyncio.gather(*tasks)

    outs = asyncio.run(main())
    good = outs[:3]
    assert outs[3].extra_fields["error"]  # the failed member does not hold the group up
    assert all(o.extra_fields["group_reward_components"]["group_size"] == pytest.approx(0.3) for o in good)
    ranks = sorted(o.extra_fields["group_reward_components"]["rank"] for o in good)
    assert ranks == pytest.approx([0.0, 0.1, 0.2])
    for o in good:
        assert o.reward_score == pytest.approx(o.extra_fields["reward"])
        assert o.reward_score == pytest.approx(sum(o.extra_fields["reward_components"].values()))


def test_a_group_hooks_known_bonus_reaches_verls_reward_score(tokenizer):
    """tests/trainers/test_every_face.py's group case on verl: a group hook adding 0.5, two samples of one ``uid``
    that solve the task: each one's ``reward_score`` (what verl trains on) is 1.5, not 1.0."""
    from aworld_gym.core.rewards import Hook, default_hooks

    class Server(StandInServer):
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            await asyncio.sleep(0.01)
            reply = ids(tokenizer, ANSWER if request_id in self.seen else CALL)
            self.seen.add(request_id)
            return TokenOutput(token_ids=reply, log_probs=[LOGPROB] * len(reply), stop_reason="completed")

    server = Server([])
    server.seen = set()
    hooks = [*default_hooks(), Hook(lambda group: [0.5] * len(group), name="bonus", on="group")]
    kwargs = {**tool_choice_env_kwargs(**FIXED), "reward_hooks": hooks}

    async def main():
        rows = [{**row(env_kwargs=kwargs), "uid": "b"} for _ in range(2)]
        return await asyncio.gather(*(make_loop(tokenizer, server).run({"temperature": 1.0}, **r) for r in rows))

    outs = asyncio.run(main())
    assert [o.reward_score for o in outs] == [1.5, 1.5]
    assert all(o.extra_fields["group_reward_components"] == {"bonus": 0.5} for o in outs)


def test_the_same_trajectory_as_the_drivers_token_mode(tokenizer):
    """The verl face is the episode driver: the same scripted turns give the same token ids, mask and turns."""
    import gymnasium as gym

    from aworld_gym.rollout.tokens import ChatTokens
    from aworld_gym.trainers.seam.token_rollout import scripted_episode

    env = gym.make("AWorld/MCP-v0", **tool_choice_env_kwargs(**FIXED))
    try:
        direct = scripted_episode(env, ChatTokens(tokenizer), [CALL, ANSWER], options={"task_index": 0}, budget=512)
    finally:
        env.close()
    out = run(make_loop(tokenizer, StandInServer([ids(tokenizer, CALL), ids(tokenizer, ANSWER)])), **row())
    assert out.prompt_ids == direct.tokens.prompt_ids
    assert out.response_ids == direct.tokens.completion_ids and out.response_mask == direct.tokens.mask
    assert out.reward_score == pytest.approx(direct.reward) and out.extra_fields["status"] == direct.status == "ok"


def test_a_server_killed_mid_episode_is_masked_in_its_group(tokenizer):
    """Two of four samples of a group lose their MCP server mid-episode (the demo server's crash tool ends its
    process): they are void, every token masked, and their score is the live samples' mean, so verl's GRPO baseline
    is what it would be without them."""
    from tests.helpers import demo_env_kwargs

    crash = ids(tokenizer, '<tool_call>{"name": "crash", "arguments": {}}</tool_call>')
    add = ids(tokenizer, '<tool_call>{"name": "add", "arguments": {"a": 0, "b": 1}}</tool_call>')
    right, wrong = ids(tokenizer, "<answer>1.0</answer>"), ids(tokenizer, "<answer>7</answer>")

    class Server(StandInServer):
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            await asyncio.sleep(0.01)
            n = self.order.setdefault(request_id, len(self.order))
            first = request_id not in self.seen
            self.seen.add(request_id)
            reply = (crash if n % 2 else add) if first else (right if n == 0 else wrong)
            return TokenOutput(token_ids=reply, log_probs=[LOGPROB] * len(reply), stop_reason="completed")

    server = Server([])
    server.seen, server.order = set(), {}
    extra = {"env_id": "AWorld/MCP-v0", "env_kwargs": demo_env_kwargs(2, "stdio"), "task_id": "add-0"}

    async def main():
        loops = [make_loop(tokenizer, server) for _ in range(4)]
        return await asyncio.gather(*(lp.run({"temperature": 1.0}, raw_prompt=[], extra_info=extra, uid="g")
                                      for lp in loops))  # fmt: skip

    outs = asyncio.run(main())
    void = [o for o in outs if o.extra_fields["status"] == "void"]
    live = [o for o in outs if o.extra_fields["status"] != "void"]
    assert len(void) == 2 and len(live) == 2
    assert all(o.extra_fields["termination"] == "env_crash" and o.extra_fields["weight"] == 0.0 for o in void)
    assert all(sum(o.response_mask) == 0 for o in void) and all(sum(o.response_mask) > 0 for o in live)
    mean = sum(o.reward_score for o in live) / 2
    assert sorted(o.reward_score for o in live) == pytest.approx([0.0, 1.0])
    assert all(o.reward_score == pytest.approx(mean) for o in void)
    advantages_of_the_group_with_and_without_its_void_samples(outs)


def advantages_of_the_group_with_and_without_its_void_samples(outs):
    """verl's ``grpo`` on the group: the void samples (on the mean) shrink the std and inflate the live samples'
    advantages sqrt(3) times (+-1.22 for +-0.71); ``aworld_grpo`` gives them what the live samples alone give."""
    import numpy as np
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, get_adv_estimator_fn

    n = max(len(o.response_mask) for o in outs)
    mask = torch.tensor([list(o.response_mask) + [0] * (n - len(o.response_mask)) for o in outs], dtype=torch.float32)
    rewards = torch.zeros(len(outs), n)
    for i, o in enumerate(outs):
        rewards[i, len(o.response_mask) - 1] = o.reward_score  # verl puts the score on the last response token
    index = np.array(["g"] * len(outs), dtype=object)
    live = [i for i, o in enumerate(outs) if o.extra_fields["status"] != "void"]
    alone, _ = compute_grpo_outcome_advantage(rewards[live], mask[live], index[live])
    verls, _ = compute_grpo_outcome_advantage(rewards, mask, index)
    ours, _ = get_adv_estimator_fn("aworld_grpo")(token_level_rewards=rewards, response_mask=mask, index=index,
                                                  config={"norm_adv_by_std_in_grpo": True})  # fmt: skip
    first = [int(m.nonzero()[0]) for m in mask[live]]
    alone_first = [float(alone[k, j]) for k, j in enumerate(first)]
    assert sorted(alone_first) == pytest.approx([-0.7071, 0.7071], abs=1e-3)
    inflated = [float(verls[i, j]) for i, j in zip(live, first, strict=True)]
    assert inflated == pytest.approx([a * 3**0.5 for a in alone_first], 1e-3)
    assert torch.allclose(ours[live], alone) and float(ours.abs().sum()) == pytest.approx(float(alone.abs().sum()))
