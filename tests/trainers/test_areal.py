"""AReaL: the workflow against AReaL's real RolloutWorkflow, ModelRequest/ModelResponse and GenerationHyperparameters
(installed --no-deps with what areal.api imports; its inference engines need a GPU, so the engine is a stand-in with
``agenerate``'s contract), and the agent protocol against an OpenAI-compatible stand-in."""

from __future__ import annotations

import asyncio

import pytest

workflow_api = pytest.importorskip("areal.api.workflow_api")
from areal.api.cli_args import GenerationHyperparameters  # noqa: E402
from areal.api.io_struct import ModelResponse  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from aworld_gym.rollout.tokens import ChatTokens  # noqa: E402
from aworld_gym.trainers.areal import AWorldAgent, AWorldWorkflow, per_token_versions  # noqa: E402
from tests.helpers import ANSWER, CALL, CRASH, demo_env_kwargs, scripted_tokens, stdio_config  # noqa: E402


class Engine:
    """AReaL's ``InferenceEngine.agenerate(ModelRequest) -> ModelResponse`` with scripted replies (version 3)."""

    def __init__(self, chat: ChatTokens) -> None:
        self.chat, self.requests = chat, []

    async def agenerate(self, req):
        self.requests.append(req)
        text = self.chat.decode(req.input_ids)
        turn = text.count("<|im_start|>assistant") - 1
        reply = (CRASH if "3 + 1" in text else CALL) if turn == 0 else ANSWER
        ids = [*self.chat.encode(reply), self.chat.eos_id][: req.gconfig.max_new_tokens]
        return ModelResponse(input_tokens=list(req.input_ids), output_tokens=ids, output_logprobs=[-0.5] * len(ids),
                             output_versions=[3] * len(ids), stop_reason="stop")  # fmt: skip


def test_the_workflow_returns_areals_tensors_token_exactly(tiny):
    tok = AutoTokenizer.from_pretrained(tiny)
    chat = ChatTokens(tok)
    kwargs = demo_env_kwargs(4)
    ref = scripted_tokens(chat, [CALL, ANSWER], "add-2", kwargs).tokens
    flow = AWorldWorkflow(GenerationHyperparameters(max_new_tokens=64, max_tokens=2048), tok, "AWorld/MCP-v0", kwargs)
    assert isinstance(flow, workflow_api.RolloutWorkflow)
    engine = Engine(chat)
    out = asyncio.run(flow.arun_episode(engine, {"task_id": "add-2"}))
    assert set(out) == {"input_ids", "attention_mask", "loss_mask", "logprobs", "versions", "rewards"}
    assert all(v.shape[0] == 1 for v in out.values())
    assert out["input_ids"][0].tolist() == ref.prompt_ids + ref.completion_ids
    mask = out["loss_mask"][0].tolist()
    assert mask == [0] * len(ref.prompt_ids) + ref.mask
    versions = out["versions"][0].tolist()
    assert {v for v, m in zip(versions, mask, strict=True) if m} == {3} and set(versions[: len(ref.prompt_ids)]) == {-1}
    assert out["rewards"].tolist() == [1.0] and engine.requests[0].gconfig.max_new_tokens == 64


def test_a_void_episode_is_rejected_or_zeroed_by_the_void_policy(tiny):
    tok = AutoTokenizer.from_pretrained(tiny)
    kwargs = {"mcp_config": stdio_config(), "tasks": demo_env_kwargs(4)["tasks"]}
    for policy, rejected in (("mask", True), ("zero", False)):
        flow = AWorldWorkflow(GenerationHyperparameters(max_new_tokens=64, max_tokens=2048), tok, "AWorld/MCP-v0",
                              kwargs, void_policy=policy)  # fmt: skip
        out = asyncio.run(flow.arun_episode(Engine(ChatTokens(tok)), {"task_id": "add-3"}))  # its server dies
        assert flow.last.status == "void" and flow.last.termination == "env_crash"
        assert (out is None) == rejected
        if out is not None:
            assert out["loss_mask"].sum().item() == 0 and out["rewards"].tolist() == [0.0]


def test_per_token_versions():
    assert per_token_versions([1, 1, 0, 0, 1], [[5, 6], [7]]) == [5, 6, -1, -1, 7]


def test_the_agent_runs_against_an_openai_compatible_proxy():
    from tests.fake_openai import FakeOpenAI

    agent = AWorldAgent("AWorld/MCP-v0", demo_env_kwargs(4), model="m", retries=0)
    with FakeOpenAI() as server:
        reward = asyncio.run(agent.run({"task_id": "add-2"}, base_url=server.url))
    assert reward == 1.0 and agent.last.status == "ok" and agent.last.num_turns == 2
    with pytest.raises(Exception, match="base_url"):
        asyncio.run(agent.run({"task_id": "add-2"}))
