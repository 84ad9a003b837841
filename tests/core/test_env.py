"""MCPEnv end to end against real MCP servers."""

import json
import subprocess
import sys

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import aworld_gym
from aworld_gym.core.rewards import CallCost
from aworld_gym.mcp.demo_server import build_server
from aworld_gym.wrappers import RewardShaping
from tests.helpers import TASKS, child_pids, http_config, meeting_server, stdio_config, wait_until


def tc(name, **args):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}\n</tool_call>"


@pytest.fixture(params=["inprocess", "stdio", "http"])
def config(request, http_url):
    return {
        "inprocess": lambda: {"mcpServers": {"demo": build_server}},
        "stdio": stdio_config,
        "http": lambda: http_config(http_url),
    }[request.param]()


def make(config, **kw):
    kw.setdefault("tool_timeout", 3)
    return gym.make("AWorld/MCP-v0", mcp_config=config, tasks=TASKS, **kw)


def test_check_env_passes(config):
    env = make(config)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_scripted_multi_turn_episode(config):
    env = make(config)
    obs, info = env.reset(options={"task_id": "mul"})
    assert obs == "What is 6 * 7? Use the multiply tool."
    assert info["task_id"] == "mul" and "multiply" in [t["function"]["name"] for t in info["tools"]]
    system = env.unwrapped.messages[0]["content"]
    assert "<tools>" in system and '"name": "multiply"' in system and "<tool_call>" in system

    obs, r, term, trunc, info = env.step("<think>use the tool</think>" + tc("multiply", a=6, b=7))
    assert obs == "<tool_response>\n42.0\n</tool_response>"
    assert (r, term, trunc, info["action_error"]) == (0.0, False, False, None)
    assert info["tool_calls"] == [{"id": "call_1", "name": "multiply", "arguments": {"a": 6, "b": 7}}]

    obs, r, term, trunc, info = env.step(tc("add", a=1, b=1) + tc("echo", text="x"))
    assert obs.count("<tool_response>") == 2 and "2.0" in obs and "\nx\n" in obs

    obs, r, term, trunc, info = env.step("The product is <answer>42</answer>")
    assert (r, term, trunc) == (1.0, True, False)
    assert info["reward_components"] == {"task": 1.0} and info["score"] == 1.0
    msgs = env.unwrapped.messages
    assert [m["role"] for m in msgs] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert msgs[2]["tool_calls"][0]["function"] == {"name": "multiply", "arguments": '{"a": 6, "b": 7}'}
    assert msgs[3] == {"role": "tool", "tool_call_id": "call_1", "name": "multiply", "content": "42.0"}
    env.close()


def test_wrong_answer_scores_zero_and_contains_scorer():
    env = make({"mcpServers": {"d": build_server}})
    env.reset(options={"task_id": "add"})
    assert env.step("<answer>6</answer>")[1] == 0.0
    env.close()
    env = make({"mcpServers": {"d": build_server}}, scorer="contains")
    env.reset(options={"task_id": "add"})
    assert env.step("<answer>the sum is 5</answer>")[1] == 1.0
    env.close()


@pytest.mark.parametrize(
    ("action", "kind"),
    [
        ("I don't know what to do", "no tool call and no final answer"),
        ("<tool_call>{bad json}</tool_call>", "invalid JSON"),
        ('<tool_call>{"name": "add", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ("<tool_call>" + "x" * 2_000_000, "never closed"),
        ("\x00\x00 \ud800", "no tool call"),
    ],
)
def test_malformed_output_is_an_observation(action, kind):
    env = make({"mcpServers": {"d": build_server}})
    env.reset(seed=1)
    obs, r, term, trunc, info = env.step(action)
    assert kind in info["action_error"] and kind in obs
    assert "<tool_call>" in obs  # the format hint
    assert (term, trunc) == (False, False)
    assert info["reward_components"]["format"] == -0.1
    env.close()


@pytest.mark.parametrize(
    ("call", "kind", "fragment"),
    [
        (tc("search_web", q="x"), "unknown_tool", "unknown tool 'search_web'"),
        (tc("add", x=1, b=2), "bad_arguments", "unknown argument(s) 'x'"),
        (tc("add", a="one", b=2), "bad_arguments", "'one' is not of type 'number'"),
        (tc("echo", text="z" * 300_000), "too_large", "the limit is 200000"),
    ],
)
def test_wrong_tool_use_is_an_observation(call, kind, fragment):
    env = make({"mcpServers": {"d": build_server}})
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step(call)
    assert fragment in obs and fragment in info["action_error"]
    assert info["tool_results"][0]["error"] == kind
    assert info["reward_components"] == {"tool_error": -0.05}
    assert not (term or trunc)
    env.close()


def test_oversized_output_is_truncated_with_a_note():
    env = make({"mcpServers": {"d": build_server}}, max_tool_output_chars=1000)
    env.reset(seed=0)
    obs, *_, info = env.step(tc("big_output", chars=5000))
    assert "output truncated: showing the first 1000 of 5000 characters" in obs
    assert info["tool_results"][0]["truncated"] is True
    env.close()


def test_hung_tool_truncates_with_tool_timeout_then_reset_works(config):
    env = make(config)
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step(tc("sleep", seconds=60))
    assert trunc and not term and info["truncation_reason"] == "tool_timeout"
    assert "did not answer within 3 s" in obs
    env.reset(seed=0)
    assert env.step(tc("noop"))[0] == "<tool_response>\nok\n</tool_response>"
    env.close()


def test_dead_server_truncates_with_env_crash_then_reset_works():
    env = make(stdio_config())
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step(tc("crash"))
    assert trunc and info["truncation_reason"] == "env_crash" and "died" in obs
    env.reset(seed=0)
    assert env.step(tc("add", a=1, b=2))[0] == "<tool_response>\n3.0\n</tool_response>"
    env.close()


def test_infra_errors_can_be_survived():
    env = make({"mcpServers": {"d": build_server}}, truncate_on_infra_error=False, tool_timeout=0.5)
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step(tc("sleep", seconds=3))
    assert not trunc and info["tool_results"][0]["error"] == "timeout"
    env.close()


def test_turn_limit_and_char_budget():
    env = make({"mcpServers": {"d": build_server}}, max_episode_steps=2)  # Gymnasium's TimeLimit
    env.reset(seed=0)
    assert env.step(tc("noop"))[3] is False
    *_, trunc, info = env.step(tc("noop"))
    assert trunc
    env.close()
    env = make({"mcpServers": {"d": build_server}})  # the registered limit (20), labelled by the env
    env.reset(seed=0)
    for _ in range(19):
        assert not env.step(tc("noop"))[3]
    *_, trunc, info = env.step(tc("noop"))
    assert trunc and info["truncation_reason"] == "turn_limit"
    env.close()
    env = make({"mcpServers": {"d": build_server}}, max_turns=1)
    env.reset(seed=0)
    *_, trunc, info = env.step(tc("noop"))
    assert trunc and info["truncation_reason"] == "turn_limit"
    env.close()
    env = make({"mcpServers": {"d": build_server}}, max_episode_chars=500)
    env.reset(seed=0)
    *_, trunc, info = env.step(tc("echo", text="w" * 600))
    assert trunc and info["truncation_reason"] == "token_budget"
    env.close()


def test_reset_is_reproducible_and_pins_tasks():
    env = make({"mcpServers": {"d": build_server}})
    seq = [env.reset(seed=7)[1]["task_id"]] + [env.reset()[1]["task_id"] for _ in range(5)]
    seq2 = [env.reset(seed=7)[1]["task_id"]] + [env.reset()[1]["task_id"] for _ in range(5)]
    assert seq == seq2 and len(set(seq)) > 1
    assert env.reset(options={"task_index": 2})[1]["task_id"] == "echo"
    assert env.reset(options={"task": {"id": "new", "prompt": "custom", "answer": "1"}})[0] == "custom"
    env.close()


def test_per_episode_server_state_is_fresh_on_reset():
    env = make({"mcpServers": {"d": build_server}})
    env.reset(seed=0)
    assert [env.step(tc("counter"))[0] for _ in range(2)][-1] == "<tool_response>\n2\n</tool_response>"
    env.reset(seed=0)
    assert env.step(tc("counter"))[0] == "<tool_response>\n1\n</tool_response>"
    env.close()


def test_reward_shaping_wrapper():
    env = RewardShaping(make({"mcpServers": {"d": build_server}}), [CallCost(per_call=-0.5)])
    env.reset(options={"task_id": "add"})
    _, r, _, _, info = env.step(tc("add", a=2, b=3) + tc("noop"))
    assert r == -1.0 and info["reward_components"] == {"call_cost": -1.0}
    _, r, *_ = env.step("<answer>5</answer>")
    assert r == 1.0
    env.close()


def test_reset_reuses_servers_and_close_leaves_no_child():
    before = child_pids()
    env = make(stdio_config())
    env.reset(seed=0)
    spawned = child_pids() - before
    assert len(spawned) == 1
    for _ in range(3):
        env.reset()
        env.step(tc("noop"))
    assert child_pids() - before == spawned  # resets spawn nothing
    env.close()
    env.close()
    assert wait_until(lambda: not (child_pids() - before))


def test_step_before_reset_raises():
    env = make({"mcpServers": {"d": build_server}})
    with pytest.raises(gym.error.ResetNeeded):
        env.step("x")
    env.close()


def test_make_without_prior_import_and_helpful_errors(tmp_path):
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps(TASKS[0]) + "\n")
    code = f"""
import json, sys, gymnasium as gym
cfg = {{"mcpServers": {{"d": {{"command": sys.executable, "args": ["-m", "aworld_gym.mcp.demo_server"]}}}}}}
env = gym.make("aworld_gym:AWorld/MCP-v0", mcp_config=cfg, tasks={str(tasks)!r})
obs, info = env.reset(seed=0)
print(json.dumps([obs, env.step('<answer>5</answer>')[1], [m for m in ("torch", "ray", "trl") if m in sys.modules]]))
env.close()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [TASKS[0]["prompt"], 1.0, []]
    with pytest.raises(gym.error.Error, match="Did you mean"):
        gym.make("AWorld/MCPP-v0")


def test_async_face_many_envs_one_loop():
    import asyncio

    async def episode(env, task_id):
        obs, info = await env.areset(options={"task_id": task_id})
        obs, r, *_ = await env.astep(tc("sleep", seconds=0.3))
        assert "slept 0.3" in obs
        met, r, *_ = await env.astep(tc("meet"))  # returns once all 4 envs' calls are in flight at once
        return met, (await env.astep("<answer>5</answer>"))[1]

    async def main():
        servers = meeting_server(4)
        envs = [make({"mcpServers": {"d": servers}}, tool_timeout=90).unwrapped for _ in range(4)]
        out = await asyncio.gather(*(episode(e, "add") for e in envs))
        for e in envs:
            await e.hub.aclose()
        return out

    out = asyncio.run(main())
    assert [reward for _, reward in out] == [1.0] * 4
    assert [met.split() for met, _ in out] == [["<tool_response>", "met", "</tool_response>"]] * 4, out


def test_sync_calls_inside_a_running_loop_use_the_background_thread():
    import asyncio

    async def notebook_cell():
        env = make(stdio_config())
        env.reset(options={"task_id": "add"})
        obs = env.step(tc("add", a=2, b=3))[0]
        env.close()
        return obs

    assert asyncio.run(notebook_cell()) == "<tool_response>\n5.0\n</tool_response>"


class _SelfEndingEnv(aworld_gym.MCPEnv):
    """A task that ends by itself: after any tool call, the env's own (hidden) counter decides."""

    outcome = "done"

    async def abegin_task(self, task):
        self.begun = (await self.hub.acall_internal("counter")).content[0].text

    async def acheck_task(self, task, results):
        from aworld_gym.core.env import TaskState

        if self.outcome == "crash":
            return TaskState(crash="the page was lost")
        if self.outcome == "note":
            return TaskState(note="PAGE NOW: fine", info={"k": 1})
        return TaskState(done=True, score=0.5, info={"k": 2})


@pytest.mark.parametrize("face", ["sync", "async"])
def test_task_state_hooks_end_crash_or_annotate_the_episode(face):
    import asyncio

    def episode(outcome):
        env = _SelfEndingEnv({"mcpServers": {"demo": build_server}}, tasks=TASKS, deny_tools=["counter"])
        env.outcome = outcome
        if face == "sync":
            try:
                env.reset(options={"task_id": "add"})
                return env, env.step(tc("add", a=2, b=3))
            finally:
                env.close()

        async def run():
            try:
                await env.areset(options={"task_id": "add"})
                return await env.astep(tc("add", a=2, b=3))
            finally:
                await env.aclose()

        return env, asyncio.run(run())

    env, (obs, reward, term, trunc, info) = episode("done")
    assert env.begun == "1" and "counter" not in [t["function"]["name"] for t in env.tools]
    assert term and not trunc and reward == 0.5 and info["score"] == 0.5 and info["task_state"] == {"k": 2}
    assert "The task is over." in obs
    env, (obs, reward, term, trunc, info) = episode("crash")
    assert trunc and info["truncation_reason"] == "env_crash" and "the page was lost" in obs
    env, (obs, reward, term, trunc, info) = episode("note")
    assert not (term or trunc) and "5.0\nPAGE NOW: fine" in obs and info["task_state"] == {"k": 1}
    assert env.messages[-1]["role"] == "tool" and env.messages[-1]["content"].endswith("PAGE NOW: fine")


@pytest.mark.parametrize(
    "arguments",
    ['{"text": "\\ud800"}', '{"text": NaN}', '{"text": ' + "[" * 40 + "1" + "]" * 40 + "}"],
    ids=["lone-surrogate", "nan", "too-deep"],
)
def test_unsendable_arguments_are_the_models_error_and_the_session_stays(config, arguments):
    env = make(config)
    env.reset(options={"task_id": "echo"})
    obs, r, term, trunc, info = env.step(f'<tool_call>{{"name": "echo", "arguments": {arguments}}}</tool_call>')
    assert info["tool_results"][0]["error"] == "invalid_arguments"
    assert not (term or trunc) and info["reward_components"] == {"tool_error": -0.05}
    obs, *_ = env.step(tc("echo", text="still here"))
    assert obs == "<tool_response>\nstill here\n</tool_response>" and env.unwrapped.hub.restarts == 0
    env.close()
