"""HFPolicy with a tiny Qwen3 built offline: the sampled token ids and logprobs are kept exactly."""

import json
import math

import pytest

from aworld_gym.rollout.collect import collect
from tests.helpers import demo_env_kwargs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from aworld_gym.fixtures.tiny_qwen3 import build_tiny_qwen3

    return str(build_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3")))


def test_tiny_qwen3_is_small_and_speaks_qwen3(tiny):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny)
    n = sum(p.numel() for p in model.parameters())
    assert 100_000 < n < 1_000_000 and model.config.model_type == "qwen3"
    for special in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "<think>"):
        assert tok.convert_tokens_to_ids(special) != tok.unk_token_id and len(tok.tokenize(special)) == 1
    text = tok.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}],
        tools=[{"type": "function", "function": {"name": "add"}}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert text.startswith("<|im_start|>system\nS\n\n# Tools\n\n<tools>\n{") and text.endswith(
        "<|im_start|>assistant\n"
    )


def test_hf_policy_keeps_sampled_tokens_and_logprobs(tiny, tmp_path):
    from transformers import AutoTokenizer

    from aworld_gym.rollout.policies.hf_policy import HFPolicy

    out = tmp_path / "hf.jsonl"
    kwargs = {**demo_env_kwargs(2), "max_turns": 2}
    s = collect("AWorld/MCP-v0", lambda: HFPolicy(tiny, max_new_tokens=12, temperature=1.0), episodes=2,
                concurrency=1, env_kwargs=kwargs, sink=out, progress=False)  # fmt: skip
    assert s.recorded == 2
    tok = AutoTokenizer.from_pretrained(tiny)
    rec = json.loads(out.read_text().splitlines()[0])
    for turn in rec["turns"]:
        sampled = turn["sampled"]
        ids = sampled["token_ids"]
        assert 1 <= len(ids) <= 12 and len(sampled["logprobs"]) == len(ids)
        assert all(lp <= 0 and math.isfinite(lp) for lp in sampled["logprobs"])
        body = ids[:-1] if ids[-1] == tok.eos_token_id else ids
        assert tok.decode(body) == turn["action"]  # the action is exactly the sampled tokens
        assert sampled["prompt_ids"][-3:] == tok.encode("<|im_start|>assistant\n")[-3:]
