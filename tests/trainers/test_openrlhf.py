"""OpenRLHF: the token-exact AgentExecutor and the text AgentInstance against OpenRLHF's real base classes and its own
MultiTurnAgentExecutor (installed --no-deps with what its agent module imports; vLLM needs a GPU, so the engine is a
stand-in with vLLM's generate contract)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

agent = pytest.importorskip("openrlhf.utils.agent")
from transformers import AutoTokenizer  # noqa: E402

from aworld_gym.rollout.tokens import ChatTokens  # noqa: E402
from aworld_gym.trainers.openrlhf import AgentExecutor, AWorldAgentInstance, spans  # noqa: E402
from tests.helpers import ANSWER, CALL, CRASH, demo_env_kwargs, scripted_tokens, stdio_config  # noqa: E402


class Engine:
    """vLLM's async generate contract: token ids in; ``outputs[0]`` with token_ids, text, finish_reason, logprobs."""

    def __init__(self, chat: ChatTokens) -> None:
        self.chat = chat

    async def generate(self, token_ids, sampling_params, multi_modal_data=None):
        await asyncio.sleep(0)
        text = self.chat.decode(list(token_ids))
        turn = text.count("<|im_start|>assistant") - 1
        reply = (CRASH if "3 + 1" in text else CALL) if turn == 0 else ANSWER
        ids = [*self.chat.encode(reply), self.chat.eos_id][: sampling_params.max_tokens]
        lps = [{i: SimpleNamespace(logprob=-0.5)} for i in ids] if sampling_params.logprobs is not None else None
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, text=self.chat.decode(ids),
                                                        finish_reason="stop", logprobs=lps)])  # fmt: skip


def params(max_tokens=64):
    return SimpleNamespace(max_tokens=max_tokens, logprobs=1, temperature=1.0)


def test_the_executor_is_token_exact_and_a_real_agent_executor(tiny):
    tok = AutoTokenizer.from_pretrained(tiny)
    chat = ChatTokens(tok)
    kwargs = demo_env_kwargs(4)
    direct = scripted_tokens(chat, [CALL, ANSWER], "add-2", kwargs)
    assert issubclass(AgentExecutor, agent.AgentExecutorBase)
    label = {"env_id": "AWorld/MCP-v0", "env_kwargs": kwargs, "task_id": "add-2"}
    out = asyncio.run(AgentExecutor().execute("unused", label, params(), 2048, tok, Engine(chat)))
    d = direct.tokens
    assert out["observation_tokens"] == d.prompt_ids + d.completion_ids
    assert out["action_ranges"] == spans(d.mask, len(d.prompt_ids)) and len(out["action_ranges"]) == 2
    mask = [0] * len(out["observation_tokens"])
    for start, end in out["action_ranges"]:
        mask[start:end] = [1] * (end - start)
    assert mask == [0] * len(d.prompt_ids) + d.mask  # trained exactly on the model's tokens
    assert len(out["rollout_log_probs"]) == len(out["observation_tokens"])
    assert {lp for lp, m in zip(out["rollout_log_probs"], mask, strict=True) if m} == {-0.5}
    assert out["reward"] == 1.0 == out["scores"] and not out["truncated"] and out["extra_logs"]["void"] == 0.0


def test_void_samples_have_no_action_range_and_keep_the_groups_baseline(tiny):
    tok = AutoTokenizer.from_pretrained(tiny)
    engine, shared = Engine(ChatTokens(tok)), params()  # one generate_responses call: one sampling_params object
    kwargs = {"mcp_config": stdio_config(), "tasks": demo_env_kwargs(4)["tasks"]}

    async def group():
        labels = [json.dumps({"env_id": "AWorld/MCP-v0", "env_kwargs": kwargs, "task_id": f"add-{2 + i % 2}"})
                  for i in range(4)]  # fmt: skip
        return await asyncio.gather(*(AgentExecutor().execute("p", lb, shared, 2048, tok, engine) for lb in labels))

    outs = asyncio.run(group())
    assert [o["extra_logs"]["void"] for o in outs] == [0.0, 1.0, 0.0, 1.0]  # add-3 kills its server
    assert [o["action_ranges"] == [] for o in outs] == [False, True, False, True]
    assert [o["reward"] for o in outs] == [1.0, 1.0, 1.0, 1.0]  # the void ones: the live members' mean


def test_the_text_instance_runs_in_openrlhfs_own_multi_turn_executor(tiny, monkeypatch):
    tok = AutoTokenizer.from_pretrained(tiny)
    monkeypatch.setenv("AWORLD_TOKENIZER", str(tiny))
    kwargs = {"mcp_config": stdio_config(), "tasks": demo_env_kwargs(4)["tasks"]}
    label = json.dumps({"env_id": "AWorld/MCP-v0", "env_kwargs": kwargs, "task_id": "add-2"})
    executor = agent.MultiTurnAgentExecutor(AWorldAgentInstance)
    out = asyncio.run(executor.execute("unused", label, params(), 2048, tok, Engine(ChatTokens(tok))))
    assert out["reward"] == 1.0 and len(out["action_ranges"]) == 2
    text = tok.decode(out["observation_tokens"])
    assert "<tool_response>\n3.0\n</tool_response>" in text and text.count("<|im_start|>assistant") == 2
