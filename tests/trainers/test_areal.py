"""AReaL: the workflow against AReaL's real RolloutWorkflow, ModelRequest/ModelResponse and GenerationHyperparameters
(installed --no-deps with what areal.api imports; its inference engines need a GPU, so the engine is a stand-in with
``agenerate``'s contract), and the agent protocol against an OpenAI-compatible stand-in."""

from __future__ import annotations

import asyncio

import pytest

workflow_api = pytest.importorskip("areal.api.workflow_api")
from areal.api.cli_args import GenerationHyperparameters  # noqa: E402
from areal.api.io_struct import ModelRequest, ModelResponse  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from aworld_gym.rollout.tokens import ChatTokens  # noqa: E402
from aworld_gym.trainers.areal import AWorldAgent, AWorldWorkflow, per_token_versions  # noqa: E402
from tests.helpers import ANSWER, CALL, CRASH, demo_env_kwargs, scripted_tokens, stdio_config  # noqa: E402


class Engine:
    """AReaL's ``InferenceEngine.agenerate(ModelRequest) -> ModelResponse`` (checked below) with scripted replies
    (version 3), cut at ``gconfig.max_new_tokens`` with ``stop_reason="length"``, ``abort`` once ``abort`` is set."""

    def __init__(self, chat: ChatTokens, reply: str | None = None, abort: bool = False) -> None:
        self.chat, self.requests, self.reply, self.abort = chat, [], reply, abort

    async def agenerate(self, req: ModelRequest) -> ModelResponse:
        self.requests.append(req)
        text = self.chat.decode(req.input_ids)
        turn = text.count("<|im_start|>assistant") - 1
        reply = self.reply or ((CRASH if "3 + 1" in text else CALL) if turn == 0 else ANSWER)
        full = [*self.chat.encode(reply), self.chat.eos_id]
        ids = [] if self.abort else full[: req.gconfig.max_new_tokens]
        stop = "abort" if self.abort else "length" if len(ids) < len(full) else "stop"
        return ModelResponse(input_tokens=list(req.input_ids), output_tokens=ids, output_logprobs=[-0.5] * len(ids),
                             output_versions=[3] * len(ids), stop_reason=stop)  # fmt: skip


def test_the_workflow_returns_areals_tensors_token_exactly(tiny):
    tok = AutoTokenizer.from_pretrained(tiny)
    chat = ChatTokens(tok)
    kwargs = demo_env_kwargs(4)
    ref = scripted_tokens(chat, [CALL, ANSWER], "add-2", kwargs).tokens
    flow = AWorldWorkflow(GenerationHyperparameters(max_new_tokens=64, max_tokens=2048), tok, "AWorld/MCP-v0", kwargs)
    assert isinstance(flow, workflow_api.RolloutWorkflow)
    engine = Engine(chat)
    from areal.utils import stats_tracker

    stats_tracker.get("rollout").export()  # whatever earlier tests of this process logged, cleared
    out = asyncio.run(flow.arun_episode(engine, {"task_id": "add-2"}))
    assert set(out) == {"input_ids", "attention_mask", "loss_mask", "logprobs", "versions", "rewards"}
    assert all(v.shape[0] == 1 for v in out.values())
    assert out["input_ids"][0].tolist() == ref.prompt_ids + ref.completion_ids
    mask = out["loss_mask"][0].tolist()
    assert mask == [0] * len(ref.prompt_ids) + ref.mask
    versions = out["versions"][0].tolist()
    assert {v for v, m in zip(versions, mask, strict=True) if m} == {3} and set(versions[: len(ref.prompt_ids)]) == {-1}
    assert out["rewards"].tolist() == [1.0] and engine.requests[0].gconfig.max_new_tokens == 64
    logged = stats_tracker.get("rollout").export()  # what AReaL logs: the episode's void and parse health
    assert logged["rollout/void"] == 0.0 and logged["rollout/parse/tool_call_turns"] == 0.5
    assert logged["rollout/parse/failure_turns"] == 0.0 and logged["rollout/parse/tool_call_turns__count"] == 1


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


def test_the_stand_in_keeps_areals_engine_contract():
    """Fails when AReaL changes ``InferenceEngine.agenerate``, the ``ModelRequest`` / ``ModelResponse`` fields the
    face writes and reads, the stop reasons it can report, or the ``GenerationHyperparameters`` the face uses."""
    import dataclasses
    import typing

    from areal.api.engine_api import InferenceEngine

    from tests.trainers.contract import params

    assert params(Engine.agenerate) == params(InferenceEngine.agenerate)
    assert {"input_ids", "gconfig", "tokenizer"} <= {f.name for f in dataclasses.fields(ModelRequest)}
    response = {f.name for f in dataclasses.fields(ModelResponse)}
    assert {"input_tokens", "output_tokens", "output_logprobs", "output_versions", "stop_reason"} <= response
    stop = next(f.type for f in dataclasses.fields(ModelResponse) if f.name == "stop_reason")
    assert set(typing.get_args(stop)) == {"length", "stop", "tool_calls", "abort"}
    g = GenerationHyperparameters(max_new_tokens=5, max_tokens=50)
    assert g.new(n_samples=1, max_new_tokens=3).max_new_tokens == 3 and g.max_tokens == 50


def test_a_reply_cut_at_max_new_tokens_ends_with_length_and_is_trained(tiny):
    tok = AutoTokenizer.from_pretrained(tiny)
    flow = AWorldWorkflow(GenerationHyperparameters(max_new_tokens=8, max_tokens=2048), tok, "AWorld/MCP-v0",
                          demo_env_kwargs(4))  # fmt: skip
    out = asyncio.run(flow.arun_episode(Engine(ChatTokens(tok), reply="thinking " * 40), {"task_id": "add-2"}))
    assert flow.last.termination == "length" and flow.last.status == "failed"
    assert out["loss_mask"][0].sum().item() == 8 and out["rewards"].tolist() == [0.0]


def test_an_aborted_generation_is_rejected(tiny):
    tok = AutoTokenizer.from_pretrained(tiny)
    flow = AWorldWorkflow(GenerationHyperparameters(max_new_tokens=64, max_tokens=2048), tok, "AWorld/MCP-v0",
                          demo_env_kwargs(4))  # fmt: skip
    assert asyncio.run(flow.arun_episode(Engine(ChatTokens(tok), abort=True), {"task_id": "add-2"})) is None
    assert flow.last.termination == "abort" and flow.last.status == "void"
