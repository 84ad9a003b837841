"""The docs' examples run as written: the 'write your own environment' page, through every face."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

DOCS = Path(__file__).resolve().parents[1] / "docs"


def blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.DOTALL)


@pytest.fixture(scope="module")
def units():
    code = blocks("write-your-own-env.md")
    namespace: dict = {"__name__": "docs_units"}
    exec(compile(code[0], "write-your-own-env.md", "exec"), namespace)
    return namespace


def test_the_new_env_is_small_and_registered(units):
    code = [line for line in blocks("write-your-own-env.md")[0].splitlines() if line.strip()]
    assert len(code) <= 45  # "about 40 lines"
    import aworld_gym

    assert aworld_gym.reference_policy("Lab/Units-v0") is units["UnitsReference"]
    assert gym.spec("Lab/Units-v0").max_episode_steps == 4


def test_the_usage_block_runs(units, capsys):
    namespace: dict = {}
    exec(compile(blocks("write-your-own-env.md")[1], "usage", "exec"), namespace)
    assert capsys.readouterr().out.strip() == "1.0"
    assert namespace["info"]["units"] == ["km", "mi"]
    assert namespace["summary"].mean_reward == pytest.approx(1.2)
    namespace["env"].close()


def test_check_env_tools_and_a_manual_episode(units):
    env = gym.make("Lab/Units-v0")
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(options={"task_id": "bag"})
    assert obs == "How many pounds is 5 kg?" and [t["function"]["name"] for t in info["tools"]] == ["convert"]
    schema = info["tools"][0]["function"]["parameters"]
    assert schema["required"] == ["value", "unit", "to"] and schema["properties"]["to"]["description"]
    call = '<tool_call>{"name": "convert", "arguments": {"value": 5, "unit": "kg", "to": "oz"}}</tool_call>'
    obs, r, te, tr, info = env.step(call)  # the function raises KeyError: a tool error, the episode goes on
    assert info["tool_results"][0]["error"] == "tool_error" and not (te or tr) and r == pytest.approx(-0.05)
    for _ in range(3):
        out = env.step("<think>hmm</think>")
    assert out[3] and out[4]["truncation_reason"] == "turn_limit"  # max_episode_steps=4 of the registration
    env.close()


def test_make_rollout_func_on_the_new_env(units, tmp_path):
    pytest.importorskip("torch")
    from transformers import AutoTokenizer

    from aworld_gym.fixtures.tiny_qwen3 import build_tiny_qwen3
    from aworld_gym.rollout.tokens import ChatTokens
    from aworld_gym.trainers.trl import make_rollout_func

    tok = AutoTokenizer.from_pretrained(build_tiny_qwen3(tmp_path / "qwen3"))
    chat = ChatTokens(tok)
    turns = ['<tool_call>{"name": "convert", "arguments": {"value": 10, "unit": "km", "to": "mi"}}</tool_call>',
             "<answer>6.214</answer>"]  # fmt: skip

    def scripted(trainer):
        def generate(inputs, max_new):
            return [([*chat.encode(turns[min(chat.decode(i).count("<|im_start|>assistant") - 1, 1)]), chat.eos_id],
                     None) for i in inputs]  # fmt: skip

        return generate

    rf = make_rollout_func("Lab/Units-v0", generate=scripted)
    try:
        out = rf([[{"role": "user", "content": "How many miles is 10 km?"}]], SimpleNamespace(
            processing_class=tok, max_completion_length=400, accelerator=None))  # fmt: skip
    finally:
        rf.close()
    assert out["task_id"] == ["run"] and out["reward"] == [pytest.approx(1.2)]
    assert out["reward_components"] == [{"task": 1.0, "efficiency": pytest.approx(0.2)}]
    assert 0 in out["env_mask"][0] and out["env_mask"][0][0] == 1  # model ids, then the env's tool response


def test_the_trainer_adapter_guide_is_about_60_lines_on_the_shared_pieces():
    code = blocks("trainer-adapter.md")[0]
    lines = [line for line in code.splitlines() if line.strip()]
    assert len(lines) <= 65  # "about 60 lines"
    for piece in ("run_pooled", "GroupCollector", "training_rewards", "TokenMode", "EnvPool"):
        assert piece in code  # built on the driver, the pool and the group collector, not a loop of its own
    assert "while " not in code and "astep" not in code and ".step(" not in code
