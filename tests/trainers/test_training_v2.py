"""Training v2: one Trajectory through every face, void episodes masked in a real TRL GRPO step, context limits."""

import json
import math
from types import SimpleNamespace

import gymnasium as gym
import pytest

pytest.importorskip("trl")
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import aworld_gym  # noqa: F401
from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.policies.hf_policy import HFPolicy
from aworld_gym.rollout.stream import stream
from aworld_gym.rollout.tokens import ChatTokens
from aworld_gym.trainers.trl import env_reward, make_rollout_func, task_dataset
from tests.helpers import ANSWER, CALL, CRASH, TextScript, demo_env_kwargs, scripted_tokens
from tests.trainers.test_trl import RecordingTrainer, batch_rows, config, recorded


def turn_of(chat, ids):
    return chat.decode(ids).count("<|im_start|>assistant") - 1  # model turns so far


def scripted(chat, texts):
    """A batch backend that answers turn ``k`` of every episode with ``texts[k]`` (known token ids)."""

    def make(trainer):
        def generate(inputs, max_new):
            return [([*chat.encode(texts[min(turn_of(chat, ids), len(texts) - 1)]), chat.eos_id], None)
                    for ids in inputs]  # fmt: skip

        return generate

    return make


def comparable(traj):
    turns = [{k: t[k] for k in ("turn", "action", "tool_calls", "observation", "reward", "reward_components")}
             for t in traj.turns]  # fmt: skip
    return turns, traj.reward, traj.status, traj.termination, traj.score


def test_one_trajectory_through_every_face(tiny):
    """The same task and policy give equal Trajectories through the driver's token mode, TRL's rollout_func and the
    runner (turns, rewards, ending); the token faces give the same token ids."""
    tok = AutoTokenizer.from_pretrained(tiny)
    chat = ChatTokens(tok)
    kwargs = demo_env_kwargs(4)
    direct = scripted_tokens(chat, [CALL, ANSWER], "add-2", kwargs)
    rf = make_rollout_func("AWorld/MCP-v0", generate=scripted(chat, [CALL, ANSWER]), **kwargs)
    trainer = SimpleNamespace(processing_class=tok, max_completion_length=400, accelerator=None)
    try:
        out = rf([[{"role": "user", "content": "What is 2 + 1? Use the add tool."}]], trainer)
        (via_trl,) = rf.last_trajectories
    finally:
        rf.close()
    one_task = {**kwargs, "tasks": kwargs["tasks"][2:3]}
    with stream("AWorld/MCP-v0", TextScript([CALL, ANSWER]), episodes=1, env_kwargs=one_task) as s:
        (via_runner,) = list(s)
    assert comparable(direct) == comparable(via_trl) == comparable(via_runner)
    assert direct.status == "ok" and direct.reward == 1.0 and direct.num_turns == 2
    assert via_trl.tokens == direct.tokens  # token for token, mask for mask
    assert out["completion_ids"] == [direct.tokens.completion_ids] and out["env_mask"] == [direct.tokens.mask]
    assert out["status"] == ["ok"] and out["reward"] == [1.0] and out["termination"] == ["answer"]


class KillsHalf:
    """A batch backend: the first turn of odd rows calls the demo server's ``crash`` tool (the server process exits:
    a real mid-episode kill), even rows call ``add``; then every row answers."""

    def __init__(self, chat):
        self.chat = chat

    def __call__(self, trainer):
        def generate(inputs, max_new):
            out = []
            for i, ids in enumerate(inputs):
                first = turn_of(self.chat, ids) == 0
                text = (CRASH if i % 2 else CALL) if first else ANSWER
                out.append(([*self.chat.encode(text), self.chat.eos_id], None))
            return out

        return generate


def test_void_samples_are_masked_in_a_real_trl_grpo_step(tiny, tmp_path):
    """Half of each GRPO group loses its MCP server mid-episode: those samples are void, every one of their completion
    tokens is masked in the loss batch, their advantage is 0, the group's baseline is the live samples' mean, and the
    trainer logs void/rate."""
    model, tok = AutoModelForCausalLM.from_pretrained(tiny), AutoTokenizer.from_pretrained(tiny)
    chat = ChatTokens(tok)
    kwargs = demo_env_kwargs(4, "stdio")
    rf = make_rollout_func("AWorld/MCP-v0", generate=KillsHalf(chat), out=tmp_path / "train.jsonl", **kwargs)
    record, seen = recorded(rf)

    def right_answer(completions, score=None, weight=None, **_):  # varies within a group: wrong vs right answers
        return [None if w == 0 else float(s or 0.0) for s, w in zip(score, weight, strict=True)]

    trainer = RecordingTrainer(
        model=model, processing_class=tok, reward_funcs=[env_reward, right_answer],
        args=config(tmp_path, max_completion_length=200, max_steps=1), train_dataset=task_dataset(
            "AWorld/MCP-v0", limit=1, **{**kwargs, "tasks": kwargs["tasks"][2:3]}), rollout_func=record,
    )  # fmt: skip
    try:
        trainer.train()
    finally:
        rf.close()
    assert [t.status for t in seen] == ["ok", "void"] * 2
    assert {t.termination for t in seen if t.void} == {"env_crash"}
    assert all(t.weight == 0.0 for t in seen if t.void)
    rows = [r for b in trainer.batches for r in batch_rows(b)]
    by_ids = {tuple(t.tokens.completion_ids): t for t in seen}
    for ids, mask in rows:
        traj = by_ids[tuple(ids)]
        assert (sum(mask) == 0) == traj.void  # every token of a void sample masked; live ones train
    adv = torch.cat([b["advantages"].flatten() for b in trainer.batches]).tolist()
    assert len(adv) == 4 and adv[1] == adv[3] == 0.0  # void rows: no advantage
    assert all(math.isfinite(a) for a in adv)
    logged = [h for h in trainer.state.log_history if "void/rate" in h]
    assert logged and logged[0]["void/rate"] == pytest.approx(0.5) and logged[0]["void/env_crash"] == pytest.approx(2)
    health = {k: v for k, v in logged[0].items() if k.startswith("parse/")}  # the batch's parse health beside it
    turns = [t for traj in seen for t in traj.turns]
    assert health["parse/tool_call_turns"] == pytest.approx(sum(bool(t["tool_calls"]) for t in turns) / len(turns))
    assert set(health) == {"parse/tool_call_turns", "parse/failure_turns", "parse/no_tool_call_episodes",
                           "parse/unknown_tools", "parse/alarm_no_tool_call", "parse/alarm_parse_failures"}  # fmt: skip
    assert health["parse/alarm_no_tool_call"] == 0.0 and rf.health.episodes == 4  # the run's window: 4 of 200
    written = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert [(r["status"], r["train_step"]) for r in written] == [("ok", 0), ("void", 0)] * 2  # every episode kept


def test_context_limit_in_trls_rollout_func(tiny):
    tok = AutoTokenizer.from_pretrained(tiny)
    chat = ChatTokens(tok)
    kwargs = demo_env_kwargs(4)
    env = gym.make("AWorld/MCP-v0", **kwargs)
    env.reset(options={"task_id": "add-2"})
    prompt = len(chat.prompt_ids(env.unwrapped.messages))
    env.close()
    per_turn = 40
    rf = make_rollout_func("AWorld/MCP-v0", generate=scripted(chat, [CALL, CALL, ANSWER]), max_new_tokens=per_turn,
                           max_model_len=prompt + per_turn + 10, overflow_reward=-0.5, **kwargs)  # fmt: skip
    trainer = SimpleNamespace(processing_class=tok, max_completion_length=400, accelerator=None)
    try:
        out = rf([[{"role": "user", "content": "What is 2 + 1? Use the add tool."}]] * 2, trainer)
    finally:
        rf.close()
    assert out["termination"] == ["context_limit"] * 2 and out["status"] == ["failed"] * 2
    assert out["num_turns"] == [1, 1]  # the first turn fit; its tool response left no room for the next
    assert out["weight"] == [1.0, 1.0] and out["reward_components"][0]["context_limit"] == -0.5
    assert all(sum(m) > 0 for m in out["env_mask"])  # trained on: the model's own fault


def test_prompts_that_overflow_before_the_first_token_are_said_once_and_a_batch_of_them_raises(
    tiny,
):
    """A prompt that does not fit with the first turn's max_new_tokens trains on nothing: a warning with the numbers,
    once per rollout function, while the rest of its batch trains; a batch where every prompt overflows raises."""
    from aworld_gym.base.errors import PromptOverflowError

    tok = AutoTokenizer.from_pretrained(tiny)
    chat = ChatTokens(tok)
    kwargs = demo_env_kwargs(4)
    short = [{"role": "user", "content": "What is 2 + 1? Use the add tool."}]
    long = [{"role": "user", "content": "What is 2 + 1? Use the add tool. " + "Think it over. " * 20}]
    env = gym.make("AWorld/MCP-v0", **kwargs)
    sizes = []
    for prompt in (short, long):
        env.reset(options={"task": {"id": "size", "prompt": prompt[0]["content"]}})
        sizes.append(len(chat.prompt_ids(env.unwrapped.messages)))
    env.close()
    budget = 400  # the first turn's max_new_tokens: the whole max_completion_length
    limit = sizes[0] + budget + 10  # the short prompt fits, the long one does not
    assert sizes[1] + budget > limit and limit - sizes[1] > 0
    rf = make_rollout_func("AWorld/MCP-v0", generate=scripted(chat, [CALL, ANSWER]), max_model_len=limit, **kwargs)
    trainer = SimpleNamespace(processing_class=tok, max_completion_length=budget, accelerator=None)
    from aworld_gym.trainers.seam import overflow
    from tests.helpers import logged

    try:
        with logged(overflow.logger) as said:
            out = rf([short, long], trainer)
            again = rf([long, short], trainer)
            with pytest.raises(PromptOverflowError) as err:
                rf([long, long], trainer)
    finally:
        rf.close()
    assert len(said) == 1  # once per run, not once per batch
    assert said[0].startswith("1 of 2 episodes ended context_limit before the model's first token")
    assert f"({sizes[1]} prompt tokens + {budget} new tokens > the model's context of {limit})" in said[0]
    fix = f"lower max_completion_length (or make_rollout_func's max_new_tokens) to at most {limit - sizes[1]}"
    assert fix in said[0]
    # the rest of the batch trains: the short prompt's episode ran, the long one's has no token to train on
    assert out["termination"] == ["answer", "context_limit"] and again["termination"] == ["context_limit", "answer"]
    assert sum(out["env_mask"][0]) > 0 and sum(out["env_mask"][1]) == 0 and out["num_turns"][1] == 0
    text = str(err.value)
    assert text.startswith("every prompt of the batch overflowed, nothing to train on: 2 of 2 episodes")
    assert f"to at most {limit - sizes[1]}" in text


def test_context_limit_in_the_runner_with_the_tiny_qwen3(tiny):
    tok = AutoTokenizer.from_pretrained(tiny)
    kwargs = demo_env_kwargs(2)
    env = gym.make("AWorld/MCP-v0", **kwargs)
    env.reset(options={"task_index": 0})
    prompt = len(tok.apply_chat_template(env.unwrapped.messages, add_generation_prompt=True, tokenize=True,
                                         return_dict=True)["input_ids"])  # fmt: skip
    env.close()
    policy = HFPolicy(str(tiny), max_new_tokens=16, max_model_len=prompt + 15, device="cpu")
    summary = collect("AWorld/MCP-v0", lambda: policy, episodes=2, env_kwargs=kwargs, progress=False)
    assert summary.terminations == {"context_limit": 2} and summary.void == 0


def test_tool_output_cut_by_tokens(tiny):
    tok = AutoTokenizer.from_pretrained(tiny)
    text = "word " * 300
    env = gym.make("AWorld/MCP-v0", **demo_env_kwargs(2), max_tool_output_tokens=12, tokenizer=str(tiny))
    try:
        env.reset(options={"task_index": 0})
        call = '<tool_call>{"name": "echo", "arguments": {"text": "' + text + '"}}</tool_call>'
        obs, _, _, _, info = env.step(call)
    finally:
        env.close()
    assert info["tool_results"][0]["text"].strip() == text.strip()  # the tool result itself is not changed
    shown = obs.split("<tool_response>\n", 1)[1].split("\n[...", 1)[0]
    assert len(tok.encode(shown, add_special_tokens=False)) <= 12
    assert "more tokens of this tool's output were cut]" in obs


def test_the_context_defaults_to_what_the_trainer_knows():
    from aworld_gym.trainers.trl import model_len

    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=4096))
    assert model_len(SimpleNamespace(model=model)) == 4096
    vllm = SimpleNamespace(model=model, use_vllm=True, args=SimpleNamespace(vllm_max_model_length=2048))
    assert model_len(vllm) == 2048
    assert model_len(SimpleNamespace()) is None
