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
from tests.trainers.contract import Recorder, source_params  # noqa: E402
from tests.trainers.contract import params as signature  # noqa: E402


class Engine:
    """OpenRLHF's ``RolloutRayActor.generate`` (vLLM underneath; signature checked below): token ids in; vLLM's
    ``RequestOutput`` with ``outputs[0]`` (token_ids, text, finish_reason, logprobs), cut at ``max_tokens`` with
    finish reason ``length`` as vLLM does, ``abort`` (no tokens) once ``abort`` is set. The outputs record which
    fields their readers use."""

    def __init__(self, chat: ChatTokens, reply: str | None = None, abort: bool = False) -> None:
        self.chat, self.reply, self.abort = chat, reply, abort
        self.outputs: list[Recorder] = []

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        await asyncio.sleep(0)
        text = self.chat.decode(list(prompt_token_ids))
        turn = text.count("<|im_start|>assistant") - 1
        reply = self.reply or ((CRASH if "3 + 1" in text else CALL) if turn == 0 else ANSWER)
        full = [*self.chat.encode(reply), self.chat.eos_id]
        ids = [] if self.abort else full[: sampling_params.max_tokens]
        finish = "abort" if self.abort else "length" if len(ids) < len(full) else "stop"
        lps = [{i: SimpleNamespace(logprob=-0.5)} for i in ids] if sampling_params.logprobs is not None else None
        out = Recorder(index=0, token_ids=ids, text=self.chat.decode(ids), finish_reason=finish, logprobs=lps,
                       cumulative_logprob=None, stop_reason=None)  # fmt: skip
        self.outputs.append(out)
        return SimpleNamespace(outputs=[out])


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
    # the episode's parse health, which OpenRLHF logs: a tool call, then the answer
    assert out["extra_logs"]["parse/tool_call_turns"] == 0.5 and out["extra_logs"]["parse/failure_turns"] == 0.0


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


# vLLM's CompletionOutput fields (vllm/outputs.py); vLLM is not installed here, OpenRLHF's executors read a subset
COMPLETION_OUTPUT = {"index", "text", "token_ids", "cumulative_logprob", "logprobs", "finish_reason", "stop_reason"}


def test_the_stand_in_keeps_openrlhfs_engine_contract(tiny):
    """Fails when OpenRLHF changes ``RolloutRayActor.generate`` (read from its installed source: the module imports
    vLLM) or ``AgentExecutorBase.execute``, or when its own executors or this face read an output field the stand-in
    lacks (every field read is recorded)."""
    real = source_params("openrlhf.trainer.ray.vllm_engine", "RolloutRayActor", "generate")
    assert signature(Engine.generate) == real
    assert signature(AgentExecutor.execute) == signature(agent.AgentExecutorBase.execute)
    tok = AutoTokenizer.from_pretrained(tiny)
    label = {"env_id": "AWorld/MCP-v0", "env_kwargs": demo_env_kwargs(4), "task_id": "add-2"}
    ours, theirs = Engine(ChatTokens(tok)), Engine(ChatTokens(tok))
    asyncio.run(AgentExecutor().execute("unused", label, params(), 2048, tok, ours))
    asyncio.run(agent.SingleTurnAgentExecutor().execute("What is 2 + 1?", "3", params(), 2048, tok, theirs))
    read = set().union(*(o.read for o in ours.outputs + theirs.outputs))
    assert {"token_ids", "finish_reason", "logprobs"} <= read <= COMPLETION_OUTPUT


def test_a_reply_cut_at_max_tokens_is_truncated_with_length(tiny):
    """vLLM's ``length``: the episode ends with ``length`` (trainable, ``truncated``), as OpenRLHF's own executor
    marks it; the cut reply is one action range."""
    tok = AutoTokenizer.from_pretrained(tiny)
    label = {"env_id": "AWorld/MCP-v0", "env_kwargs": demo_env_kwargs(4), "task_id": "add-2"}
    engine = Engine(ChatTokens(tok), reply="thinking " * 40)
    out = asyncio.run(AgentExecutor().execute("unused", label, params(max_tokens=8), 2048, tok, engine))
    assert [o._fields["finish_reason"] for o in engine.outputs] == ["length"]
    assert out["truncated"] and out["extra_logs"]["void"] == 0.0
    assert [end - start for start, end in out["action_ranges"]] == [8]


def test_an_aborted_generation_is_void_with_no_action_range(tiny):
    tok = AutoTokenizer.from_pretrained(tiny)
    label = {"env_id": "AWorld/MCP-v0", "env_kwargs": demo_env_kwargs(4), "task_id": "add-2"}
    out = asyncio.run(
        AgentExecutor().execute("unused", label, params(), 2048, tok, Engine(ChatTokens(tok), abort=True))
    )
    assert out["extra_logs"]["void"] == 1.0 and out["action_ranges"] == [] and not out["truncated"]
