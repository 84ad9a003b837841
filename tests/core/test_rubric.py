"""Rewards as a rubric: weights, metrics, async hooks, episode hooks, group hooks, errors, LLMJudge."""

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import pytest

from aworld_gym import Hook, LLMJudge, async_face, reward_hook
from aworld_gym.core.group_rewards import apply_group_hooks
from aworld_gym.core.rewards import PassRateBonus, Rubric, TaskScore
from aworld_gym.mcp.demo_server import build_server
from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.policies.plan import PlanPolicy
from aworld_gym.wrappers import RewardShaping
from tests.helpers import TASKS, demo_env_kwargs


def tc(name, **args):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


def make(hooks, **kw):
    return async_face(gym.make("AWorld/MCP-v0", mcp_config={"mcpServers": {"demo": build_server}}, tasks=TASKS,
                    reward_hooks=hooks, **kw))  # fmt: skip


def per_call(ctx):
    return float(len(ctx.results))


async def slow_bonus(ctx):
    await asyncio.sleep(0.01)
    return {"async_bonus": 0.5} if ctx.answer else {}


def episode_calls(ctx):
    return {"calls_in_episode": float(sum(len(t["tool_calls"]) for t in ctx.turns))}


HOOKS = [
    TaskScore(),
    Hook(per_call, weight=-0.1, name="calls"),
    Hook(per_call, weight=0, name="calls_metric"),
    slow_bonus,
    Hook(episode_calls, on="episode", weight=2.0),
]


@pytest.mark.parametrize("face", ["sync", "async"])
def test_weights_metrics_async_and_episode_hooks(face):
    env = make(HOOKS)
    actions = [tc("add", a=2, b=3) + tc("echo", text="x"), "<answer>5</answer>"]

    async def arun():
        await env.areset(options={"task_id": "add"})
        rows = [await env.astep(a) for a in actions]
        await env.aclose()
        return rows

    if face == "sync":
        env.reset(options={"task_id": "add"})
        rows = [env.step(a) for a in actions]
        env.close()
    else:
        rows = asyncio.run(arun())
    first, last = rows[0][4], rows[1][4]
    assert first["reward_components"] == {"calls": pytest.approx(-0.2)}
    assert first["metrics"] == {"calls_metric": 2.0}
    assert rows[0][1] == pytest.approx(-0.2)
    assert last["reward_components"] == {"calls": 0.0, "task": 1.0, "async_bonus": 0.5, "calls_in_episode": 4.0}
    assert rows[1][1] == pytest.approx(5.5)
    assert rows[1][1] == pytest.approx(sum(last["reward_components"].values()))
    assert env.unwrapped.episode_reward == pytest.approx(5.3)


def test_a_failing_hook_is_recorded_and_strict_reraises():
    def broken(ctx):
        raise RuntimeError("oops")

    env = make([TaskScore(), reward_hook(broken, name="broken")])
    env.reset(options={"task_id": "add"})
    obs, r, te, tr, info = env.step("<answer>5</answer>")
    assert (r, te) == (1.0, True)
    assert info["reward_errors"] == {"broken": "RuntimeError: oops"}
    env.close()

    strict = make([TaskScore(), broken], strict=True)
    strict.reset(options={"task_id": "add"})
    with pytest.raises(RuntimeError, match="oops"):
        strict.step("<answer>5</answer>")
    strict.close()


def test_hooks_see_structured_content():
    seen = []

    def look(ctx):
        seen.extend(r.structured for r in ctx.results)
        return {}

    env = make([look])
    env.reset(options={"task_id": "add"})
    env.step(tc("add", a=2, b=3))
    assert seen == [{"result": 5.0}]
    env.close()


def test_group_hooks_on_records():
    records = [{"score": 1.0, "reward": 1.0}, {"score": 0.0, "reward": 0.0}, {"score": 0.0, "reward": 0.0},
               {"score": 0.0, "reward": 0.0}]  # fmt: skip
    apply_group_hooks(Rubric([PassRateBonus(bonus=1.0), Hook(lambda g: [1.0] * len(g), weight=0, name="n",
                                                                on="group")]), records)  # fmt: skip
    assert [r["reward"] for r in records] == [1.75, 0.0, 0.0, 0.0]
    assert records[0]["group_reward_components"] == {"pass_rate_bonus": 0.75}
    assert all(r["metrics"] == {"n": 1.0} for r in records)
    bad = [{"score": 1.0, "reward": 1.0}]
    apply_group_hooks(Rubric([Hook(lambda g: [], on="group", name="short")]), bad)
    assert "returned 0 values" in bad[0]["reward_errors"]["short"] and bad[0]["reward"] == 1.0


def test_collect_runs_group_hooks_on_complete_groups(tmp_path):
    sizes = []

    def group_size_hook(group):
        sizes.append(len(group))
        return [{"group_size": float(len(group))} for _ in group]

    def factory():
        env = gym.make("AWorld/MCP-v0", **demo_env_kwargs(2))
        return RewardShaping(env, [Hook(group_size_hook, on="group", weight=0.1)])

    out = tmp_path / "g.jsonl"
    summary = collect(factory, PlanPolicy(), episodes=6, group_size=3, concurrency=4, sink=out, progress=False)
    assert summary.recorded == 6 and sizes == [3, 3]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["group_reward_components"] == {"group_size": pytest.approx(0.3)} for r in rows)
    assert all(r["reward"] == pytest.approx(1.3) for r in rows)


class Judge:
    """A stand-in OpenAI-compatible judge: checks the request, answers with a score (or an error)."""

    def __init__(self, status=200, reply="Looks right. <score>0.8</score>"):
        self.status, self.reply, self.bodies = status, reply, []
        judge = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                judge.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                body = {"choices": [{"message": {"role": "assistant", "content": judge.reply}}]}
                data = json.dumps(body).encode()
                self.send_response(judge.status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.mark.parametrize("face", ["sync", "async"])
def test_llm_judge_scores_the_episode(face):
    judge = Judge()
    env = make([TaskScore(), Hook(LLMJudge(judge.url, "judge-model"), on="episode", weight=0.5)])

    async def arun():
        await env.areset(options={"task_id": "add"})
        await env.astep(tc("add", a=2, b=3))
        out = await env.astep("<answer>5</answer>")
        await env.aclose()
        return out

    if face == "sync":
        env.reset(options={"task_id": "add"})
        env.step(tc("add", a=2, b=3))
        out = env.step("<answer>5</answer>")
        env.close()
    else:
        out = asyncio.run(arun())
    assert out[4]["reward_components"] == {"task": 1.0, "judge": pytest.approx(0.4)}
    (body,) = judge.bodies
    assert body["model"] == "judge-model"
    user = body["messages"][1]["content"]
    assert "What is 2 + 3?" in user and "Final answer: 5" in user and "add({'a': 2, 'b': 3}) -> 5.0" in user
    judge.server.shutdown()


def test_llm_judge_failure_is_a_recorded_component_error():
    for judge in (Judge(status=400), Judge(reply="no verdict here")):
        env = make([TaskScore(), LLMJudge(judge.url, "m", max_retries=0)])
        env.reset(options={"task_id": "add"})
        obs, r, te, tr, info = env.step("<answer>5</answer>")
        assert (r, te) == (1.0, True) and "judge" in info["reward_errors"]
        env.close()
        judge.server.shutdown()
    env = make([LLMJudge(base_url="", model="")])
    env.reset(options={"task_id": "add"})
    assert "LLM_BASE_URL" in env.step("<answer>5</answer>")[4]["reward_errors"]["judge"]
    env.close()


def test_resumed_runs_mark_groups_split_by_the_interruption(tmp_path):
    sizes = []

    def hook(group):
        sizes.append(len(group))
        return [0.0] * len(group)

    def factory():
        return RewardShaping(gym.make("AWorld/MCP-v0", **demo_env_kwargs(2)), [Hook(hook, on="group")])

    out = tmp_path / "r.jsonl"
    collect(factory, PlanPolicy(), episodes=3, group_size=2, concurrency=1, sink=out, progress=False)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    # three episodes in groups of two: the last group was planned with one sample
    assert [r["group_complete"] for r in rows] == [True, True, True] and sizes == [2, 1]
    collect(factory, PlanPolicy(), episodes=4, group_size=2, concurrency=1, sink=out, resume=True, progress=False)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    # resumed to four: that group's second sample runs alone, without its first: scored alone, and marked
    assert len(rows) == 4 and rows[-1]["group_complete"] is False and sizes == [2, 1, 1]
