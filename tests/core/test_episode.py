"""One episode model: the ending as a table, one turn log, tool results never changed after the hub returns them."""

import asyncio
import json

import gymnasium as gym
import pytest

from aworld_gym.core.env import MCPEnv, TaskState
from aworld_gym.core.episode import Ending, StepFacts, decide_ending
from aworld_gym.core.faces import async_face
from aworld_gym.mcp.demo_server import build_server
from aworld_gym.rollout.driver import run_episode
from tests.helpers import TASKS

E = Ending
# (facts, ending): each row adds a fact of lower precedence, or shows one alone.
TABLE = [
    (StepFacts(), E()),
    (StepFacts(at_turn_limit=True), E(truncated=True, reason="turn_limit")),
    (StepFacts(over_budget=True, at_turn_limit=True), E(truncated=True, reason="token_budget")),
    (StepFacts(task_done=True, over_budget=True, at_turn_limit=True), E(terminated=True)),
    (StepFacts(infra_error="timeout", task_done=True, over_budget=True), E(truncated=True, reason="tool_timeout")),
    (StepFacts(infra_error="server_died", task_done=True), E(truncated=True, reason="env_crash")),
    (StepFacts(crash="lost", infra_error="timeout", task_done=True), E(truncated=True, reason="env_crash")),
    (StepFacts(answered=True, crash="lost", infra_error="timeout", at_turn_limit=True), E(terminated=True)),
    (StepFacts(answered=True, at_turn_limit=True, over_budget=True), E(terminated=True)),
    (StepFacts(task_done=True), E(terminated=True)),
    (StepFacts(over_budget=True), E(truncated=True, reason="token_budget")),
]


@pytest.mark.parametrize(("facts", "ending"), TABLE)
def test_ending_precedence(facts, ending):
    got = decide_ending(facts)
    assert got == ending
    assert not (got.terminated and got.truncated)
    assert got.over == (got.terminated or got.truncated)


def tc(name, **args):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


class NotingEnv(MCPEnv):
    """An env whose task check adds a note after the last tool response."""

    async def acheck_task(self, task, results):
        return TaskState(note="The page now: (nothing)")


@pytest.mark.parametrize("face", ["sync", "async"])
def test_tool_results_are_not_changed_by_the_task_note(face):
    env = NotingEnv({"mcpServers": {"demo": build_server}}, TASKS)

    async def arun():
        await env.areset(options={"task_id": "echo"})
        out = await env.astep(tc("echo", text="hi"))
        await env.aclose()
        return out

    if face == "sync":
        env.reset(options={"task_id": "echo"})
        obs, *_, info = env.step(tc("echo", text="hi"))
        env.close()
    else:
        obs, *_, info = asyncio.run(arun())
    assert info["tool_results"][0]["text"] == "hi"  # as the server returned it
    assert obs == "<tool_response>\nhi\nThe page now: (nothing)\n</tool_response>"  # the model sees the note
    assert env.messages[-1] == {"role": "tool", "tool_call_id": "call_1", "name": "echo",
                                "content": "hi\nThe page now: (nothing)"}  # fmt: skip
    assert env.turns[-1]["tool_results"][0]["text"] == "hi"


def test_the_turn_log_is_kept_once_and_read_by_the_recorder():
    from aworld_gym.rollout.policies import ScriptedPolicy

    class Scripted(ScriptedPolicy):
        def decide(self, env):
            return [tc("add", a=2, b=3), "<answer>5</answer>"][env.turn]

    env = gym.make("AWorld/MCP-v0", mcp_config={"mcpServers": {"demo": build_server}}, tasks=TASKS)
    record = run_episode(env, Scripted(), env_id="AWorld/MCP-v0", options={"task_id": "add"})
    log = env.unwrapped.turns
    assert [t["turn"] for t in record["turns"]] == [t["turn"] for t in log] == [1, 2]
    for row, entry in zip(record["turns"], log, strict=True):
        for key in ("action", "tool_calls", "tool_results", "observation", "reward", "reward_components"):
            assert row[key] == entry[key]
        assert "messages" not in row
    # env.messages is derived from the log: system, prompt, then each turn's messages
    derived = [*env.unwrapped.messages[:2], *(m for t in log for m in t["messages"])]
    assert env.unwrapped.messages == derived
    assert [m["role"] for m in derived] == ["system", "user", "assistant", "tool", "assistant"]
    assert record["reward"] == 1.0 and record["termination"] == "answer"
    env.close()


class BrokenCheck(MCPEnv):
    async def acheck_task(self, task, results):
        raise KeyError("a bug in the env")


@pytest.mark.parametrize("face", ["sync", "async"])
def test_strict_reraises_the_envs_own_bugs(face):
    async def arun(env):
        await env.areset(options={"task_id": "echo"})
        try:
            return await env.astep(tc("echo", text="hi"))
        finally:
            await env.aclose()

    def run(env):
        if face == "async":
            return asyncio.run(arun(env))
        env.reset(options={"task_id": "echo"})
        try:
            return env.step(tc("echo", text="hi"))
        finally:
            env.close()

    obs, r, te, tr, info = run(BrokenCheck({"mcpServers": {"demo": build_server}}, TASKS))
    assert tr and info["truncation_reason"] == "env_crash" and "a bug in the env" in info["action_error"]
    with pytest.raises(KeyError, match="a bug in the env"):
        run(BrokenCheck({"mcpServers": {"demo": build_server}}, TASKS, strict=True))


@pytest.mark.parametrize("face", ["sync", "async"])
def test_step_takes_an_action_with_parsed_calls_and_a_sample(face):
    from aworld_gym.base.calls import ToolCall
    from aworld_gym.core.actions import Action, Sample

    env = async_face(gym.make("AWorld/MCP-v0", mcp_config={"mcpServers": {"demo": build_server}}, tasks=TASKS))
    # the endpoint parsed the call (ids and all): the env runs it, not a parse of the text
    act = Action(
        "Let me add.", tool_calls=[ToolCall("add", {"a": 2, "b": 3}, "srv-1")], sample=Sample([5, 6], [-0.1, -0.2])
    )
    both = Action("<answer>5</answer>", tool_calls=[ToolCall("add", {"a": 1, "b": 1}, "x")])

    async def arun():
        await env.areset(options={"task_id": "add"})
        out = [await env.astep(act), await env.astep(both)]
        await env.aclose()
        return out

    if face == "sync":
        env.reset(options={"task_id": "add"})
        out = [env.step(act), env.step(both)]
        env.close()
    else:
        out = asyncio.run(arun())
    first, second = out
    assert first[0] == "<tool_response>\n5.0\n</tool_response>" and first[4]["tool_calls"][0]["id"] == "srv-1"
    assert second[2] and second[4]["answer"] == "5" and "not both" in second[4]["action_error"]
    assert env.unwrapped.turns[0]["action"] == "Let me add."


def test_records_keep_the_policys_sample():
    from aworld_gym.core.actions import Action, Sample
    from aworld_gym.rollout.policies import ScriptedPolicy

    class Sampling(ScriptedPolicy):
        def decide(self, env):
            return Action(
                "<answer>5</answer>", sample=Sample(token_ids=[1, 2], logprobs=[-0.5, -0.25], model_version=7)
            )

    env = gym.make("AWorld/MCP-v0", mcp_config={"mcpServers": {"demo": build_server}}, tasks=TASKS)
    record = run_episode(env, Sampling(), env_id="x", options={"task_id": "add"})
    env.close()
    assert record["turns"][0]["sampled"] == {"token_ids": [1, 2], "logprobs": [-0.5, -0.25], "model_version": 7}
    assert record["turns"][0]["action"] == "<answer>5</answer>" and record["reward"] == 1.0
