"""TRL's GRPO trains the model behind an agent program we did not write (issue 50): the OpenAI SDK's tool loop,
unmodified, plays AWorld/MCP-v0 against the token-recording endpoint, whose backend samples with the trainer's own
model; the loss batch holds exactly the ids the endpoint recorded, and one step moves the weights."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from aworld_gym.trainers.trl import task_dataset
from aworld_gym.trainers.trl_agents import make_agent_rollout_func
from tests.endpoint.test_agents import sdk_loop
from tests.helpers import demo_env_kwargs
from tests.trainers.test_trl import RecordingTrainer, batch_rows, changed, config, recorded, snapshot


def test_a_grpo_step_trains_the_model_behind_an_unmodified_sdk_agent(tiny, tmp_path):
    model, tok = AutoModelForCausalLM.from_pretrained(tiny), AutoTokenizer.from_pretrained(tiny)
    kwargs = demo_env_kwargs(4)
    rf = make_agent_rollout_func("AWorld/MCP-v0", sdk_loop, max_tokens=12, out=tmp_path / "train.jsonl", **kwargs)
    record, seen = recorded(rf)

    def varied(completions, **_):  # 0, 1 in each group of two: GRPO has an advantage to follow
        return [float(i % 2) for i in range(len(completions))]

    trainer = RecordingTrainer(
        model=model, processing_class=tok, reward_funcs=[varied],
        args=config(tmp_path, max_completion_length=48, max_steps=1, per_device_train_batch_size=4,
                    num_generations=2),
        train_dataset=task_dataset("AWorld/MCP-v0", limit=2, **kwargs), rollout_func=record,
    )  # fmt: skip
    before = snapshot(model)
    try:
        trainer.train()
    finally:
        rf.close()
    assert len(seen) == 4 and all(t.policy == "agent" and t.extra["agent"]["calls"] >= 1 for t in seen)
    assert {t.extra["agent"]["weights_versions"][0] for t in seen} == {0}  # sampled by the model before the step
    rows = batch_rows(trainer.batches[0])
    by_ids = {tuple(t.tokens.completion_ids): t for t in seen if t.tokens is not None}
    assert len(by_ids) >= 2  # (two samples may sample the same ids)
    for ids, mask in rows:  # what the loss saw is what the endpoint recorded, token for token
        traj = by_ids[tuple(ids)]
        assert mask == traj.tokens.mask and len(ids) <= 48
    assert changed(model, before) > 0
    assert any(torch.isfinite(torch.tensor(h["loss"])) for h in trainer.state.log_history if "loss" in h)
    assert "agent/unmerged" in {k for h in trainer.state.log_history for k in h}
    assert len((tmp_path / "train.jsonl").read_text().splitlines()) == 4
