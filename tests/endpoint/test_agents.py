"""An agent program as the policy of an episode (issue 50, step 2): the plain ``openai`` SDK tool loop, unmodified,
plays AWorld/MCP-v0 through ``AgentPolicy``: its tool calls are the episode's turns (through the env's hub), its
answer is scored by the env, its model calls are recorded by the endpoint and become the trajectory's tokens; an agent
that raises, returns nothing, hangs or is cut off by the env ends its episode with the right status, and calls it
makes after its episode are refused."""

from __future__ import annotations

import asyncio
import json
import re

import openai
import pytest

from aworld_gym.endpoint import AgentPolicy, Generated, HFBackend, TokenEndpoint
from aworld_gym.fixtures.tiny_qwen3 import build_tiny_qwen3
from aworld_gym.rollout.collect import collect
from tests.helpers import demo_env_kwargs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny") / "qwen3")


class Calculator:
    """A backend standing in for a model that has learned the task (it isolates the agent plumbing; the real sampler
    is HFBackend, used below): asked "What is i + 1?", it calls add(i, 1); shown the tool's result, it answers it."""

    weights_version = 3
    context = None

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, prompt_ids, sampling):
        prompt = self.tokenizer.decode(prompt_ids)
        results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt, re.S)
        if results:
            text = results[-1]
        else:
            a = re.findall(r"What is (\d+) \+ 1", prompt)[-1]
            text = f'<tool_call>\n{{"name": "add", "arguments": {{"a": {a}, "b": 1}}}}\n</tool_call>'
        ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
        return Generated(ids, [-0.25] * len(ids), "stop")


async def sdk_loop(ctx):
    """The OpenAI SDK's plain tool loop, as a user writes it: call the model with the tools, run what it calls, send
    the results back, until it answers."""
    client = openai.AsyncOpenAI(base_url=ctx.base_url, api_key=ctx.api_key, max_retries=0)
    messages = [{"role": "user", "content": ctx.task}]
    async with client:
        for _ in range(8):
            reply = await client.chat.completions.create(model=ctx.model, messages=messages, tools=ctx.tools)
            message = reply.choices[0].message
            if not message.tool_calls:
                return message.content
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                result = await ctx.call_tool(call.function.name, json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return None


def calculator(tiny):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    return TokenEndpoint(Calculator(tok), tok)


def test_the_sdk_tool_loop_plays_episodes_its_calls_are_turns_and_its_tokens_are_recorded(tiny, tmp_path):
    with calculator(tiny) as endpoint:
        out = tmp_path / "agent.jsonl"
        summary = collect("AWorld/MCP-v0", AgentPolicy(sdk_loop, endpoint), episodes=8, concurrency=4, sink=out,
                          progress=False, env_kwargs=demo_env_kwargs(8))  # fmt: skip
        assert endpoint.episodes.open_count == 0  # every episode's calls were closed
    assert summary.recorded == summary.successes == 8, summary.first_errors
    records = [json.loads(line) for line in out.read_text().splitlines()]
    tok = endpoint.tokenizer
    for r in records:
        i = int(r["task_id"].split("-")[1])
        assert r["policy"] == "agent" and r["status"] == "ok" and r["answer"] == f"{i + 1}.0"
        call, answer = r["turns"]  # the agent's tool call was a turn of the env, through its hub
        assert call["tool_calls"] == [{"name": "add", "arguments": {"a": i, "b": 1}, "id": call["tool_calls"][0]["id"]}]
        assert call["tool_results"][0]["text"] == f"{i + 1}.0" and answer["reward"] == 1.0
        agent = r["agent"]
        assert agent["calls"] == 2 and agent["weights_versions"] == [3]
        # the SDK sent its conversation back unchanged: the second call continues the ids of the first (not the
        # template's re-rendering of its tool call), so the episode is one sequence: the first call's ids, the tool's
        # result as the template continues after the end-of-turn token (mask 0), the second call's ids
        assert agent["merged"] and agent["continued"] == 1 and "token_samples" not in r
        tokens = r["tokens"]
        first = len(tok.encode(f'<tool_call>\n{{"name": "add", "arguments": {{"a": {i}, "b": 1}}}}\n</tool_call>',
                               add_special_tokens=False)) + 1  # fmt: skip
        second = len(tok.encode(f"{i + 1}.0", add_special_tokens=False)) + 1
        mask = tokens["mask"]
        assert mask[:first] == [1] * first and mask[-second:] == [1] * second and sum(mask) == first + second
        between = [t for t, m in zip(tokens["completion_ids"], mask, strict=True) if m == 0]
        assert f"<tool_response>\n{i + 1}.0\n</tool_response>" in tok.decode(between)
        assert [lp for lp, m in zip(tokens["logprobs"], mask, strict=True) if m] == [-0.25] * (first + second)
        assert tok.decode(tokens["completion_ids"][:first]).startswith("<tool_call>")


def test_an_agent_that_raises_answers_nothing_hangs_or_outlives_its_episode(tiny, tmp_path):
    async def raises(ctx):
        await ctx.call_tool("add", {"a": 1, "b": 1})
        raise KeyError("the agent's own bug")

    async def silent(ctx):
        return None

    async def hangs(ctx):
        await asyncio.sleep(3600)

    kept = {}

    async def keeps_going(ctx):  # calls its tools until the env's turn limit ends the episode
        kept["url"] = ctx.base_url
        while True:
            await ctx.call_tool("add", {"a": 1, "b": 1})

    with calculator(tiny) as endpoint:

        def run(agent, **kw):
            out = tmp_path / f"{agent.__name__}.jsonl"
            collect("AWorld/MCP-v0", AgentPolicy(agent, endpoint), episodes=1, progress=False, sink=out,
                    env_kwargs={**demo_env_kwargs(1), "max_turns": 3}, **kw)  # fmt: skip
            (record,) = [json.loads(line) for line in out.read_text().splitlines()]
            return record

        crashed = run(raises)  # the agent's own bug: failed (agent_error), not void, after its one tool call
        assert (crashed["termination"], crashed["status"], len(crashed["turns"])) == ("agent_error", "failed", 1)
        assert "KeyError" in crashed["error"] and crashed["agent"]["calls"] == 0
        nothing = run(silent)
        assert nothing["termination"] == "agent_error" and "without an answer" in nothing["error"]
        hung = run(hangs, policy_timeout_s=1.0)
        assert (hung["termination"], hung["status"]) == ("policy_error", "void")  # a hang: void, as a hung model's
        cut = run(keeps_going)
        assert (cut["termination"], len(cut["turns"])) == ("turn_limit", 3)  # the env ended it; the agent stopped
        assert endpoint.episodes.open_count == 0
        late = openai.OpenAI(base_url=kept["url"], api_key="x", max_retries=0)
        with pytest.raises(openai.APIStatusError) as refused:  # the agent's model call after its episode
            late.chat.completions.create(model="m", messages=[{"role": "user", "content": "still there?"}])
        assert refused.value.status_code == 410


def test_the_real_sampler_behind_an_agent_gives_a_token_exact_trajectory(tiny, tmp_path):
    """The untrained tiny Qwen3 behind the SDK loop, sampling in-process: whatever it does, the trajectory carries
    its calls' tokens as the backend sampled them (one sequence, or samples kept apart), with their weights
    version."""
    backend = HFBackend(tiny)
    out = tmp_path / "real.jsonl"
    with TokenEndpoint(backend, max_tokens=12) as endpoint:
        collect("AWorld/MCP-v0", AgentPolicy(sdk_loop, endpoint), episodes=1, progress=False, sink=out,
                env_kwargs=demo_env_kwargs(1))  # fmt: skip
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["agent"]["calls"] >= 1 and record["agent"]["weights_versions"] == [0]
    samples = [record["tokens"]] if record["agent"]["merged"] else record["token_samples"]
    for sample in samples:
        n = len(sample["completion_ids"])
        assert n >= 1 and len(sample["logprobs"]) == len(sample["mask"]) == n and sample["mask"][0] == 1
        assert all(lp <= 0 for lp in sample["logprobs"])


def test_an_agent_given_the_env_tools_as_an_mcp_config_plays_through_an_mcp_client(tiny, tmp_path):
    """The env's tools as an MCP server (the ``mcp_config`` an agent like AWorld's takes): a real MCP client over
    streamable HTTP lists them and calls one, which is the episode's turn; without the episode's header, or after
    the episode, the server refuses."""
    from aworld_gym.base.calls import ToolCall
    from aworld_gym.mcp.hub import ToolHub

    seen = {}

    async def mcp_agent(ctx):
        seen["config"] = ctx.mcp_config
        hub = ToolHub(ctx.mcp_config)
        try:
            await hub.astart()
            seen["tools"] = sorted(hub.tool_names)
            i = re.findall(r"What is (\d+) \+ 1", ctx.task)[-1]
            (result,) = await hub.acall([ToolCall(name="add", arguments={"a": int(i), "b": 1})])
            return result.text
        finally:
            await hub.aclose()

    out = tmp_path / "mcp.jsonl"
    with calculator(tiny) as endpoint, AgentPolicy(mcp_agent, endpoint) as policy:
        collect("AWorld/MCP-v0", policy, episodes=2, concurrency=2, progress=False, sink=out,
                env_kwargs=demo_env_kwargs(2))  # fmt: skip
        records = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["status"] for r in records] == ["ok", "ok"], [
            (r["termination"], r.get("error"), r["turns"]) for r in records
        ]
        assert all(r["turns"][0]["tool_calls"][0]["name"] == "add" for r in records)  # a turn of the env
        assert "add" in seen["tools"] and "multiply" in seen["tools"]  # the env's own tools, listed over MCP
        ended = ToolHub(seen["config"])  # the last episode's config, after its episode: refused
        with pytest.raises(Exception, match="no open episode"):
            ended.start()
            ended.call([ToolCall(name="add", arguments={"a": 1, "b": 1})])
        ended.close()
