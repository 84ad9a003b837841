"""One env on both faces: every wrapper gym.make adds (and the common ones) works on areset/astep/aclose, through
aworld_gym.async_face (what gym.make returns has both faces itself)."""

import asyncio
import json

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.wrappers import ClipReward, RecordEpisodeStatistics, TimeLimit, TransformObservation, TransformReward

import aworld_gym
from aworld_gym.core.faces import AsyncFaceError, AsyncWrapper, async_face, check_async
from aworld_gym.mcp.demo_server import build_server
from aworld_gym.wrappers import RewardShaping, TurnLimit
from tests.helpers import TASKS


def tc(name, **args):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


def make(**kw):
    return gym.make("AWorld/MCP-v0", mcp_config={"mcpServers": {"demo": build_server}}, tasks=TASKS, **kw)


ACTIONS = [tc("add", a=2, b=3), "no call here", "<answer>5</answer>"]


def sync_run(env):
    out = [env.reset(seed=0, options={"task_id": "add"})[0]]
    for a in ACTIONS:
        obs, r, te, tr, info = env.step(a)
        out.append((obs, float(r), te, tr, info.get("reward_components"), info.get("episode")))
        if te or tr:
            break
    env.close()
    return out


def async_run(env):
    env = async_face(env)

    async def run():
        out = [(await env.areset(seed=0, options={"task_id": "add"}))[0]]
        for a in ACTIONS:
            obs, r, te, tr, info = await env.astep(a)
            out.append((obs, float(r), te, tr, info.get("reward_components"), info.get("episode")))
            if te or tr:
                break
        await env.aclose()
        return out

    return asyncio.run(run())


def strip_time(rows):
    """RecordEpisodeStatistics' 't' is wall time: compare the rest."""
    out = []
    for row in rows:
        if isinstance(row, tuple) and row[5]:
            row = (*row[:5], {k: v for k, v in row[5].items() if k != "t"})
        out.append(row)
    return out


WRAPS = {
    "gym.make": lambda e: e,
    "TransformReward": lambda e: TransformReward(e, lambda r: 2 * r + 1),
    "ClipReward": lambda e: ClipReward(e, -0.05, 0.5),
    "TransformObservation": lambda e: TransformObservation(e, str.upper, e.observation_space),
    "RecordEpisodeStatistics": RecordEpisodeStatistics,
    "RewardShaping": lambda e: RewardShaping(e, [lambda ctx: {"bonus": 10.0} if ctx.answer else {}]),
}


@pytest.mark.parametrize("wrap", list(WRAPS))
def test_both_faces_give_identical_episodes(wrap):
    a = strip_time(sync_run(WRAPS[wrap](make())))
    b = strip_time(async_run(WRAPS[wrap](make())))
    assert a == b
    assert a[-1][2] is True  # the answer terminated the episode
    if wrap == "TransformReward":
        assert a[-1][1] == 2 * 1.0 + 1
    if wrap == "ClipReward":
        assert a[-1][1] == 0.5 and a[2][1] == -0.05
    if wrap == "TransformObservation":
        assert a[0] == TASKS[0]["prompt"].upper()
    if wrap == "RecordEpisodeStatistics":
        assert a[-1][5]["l"] == 3 and a[-1][5]["r"] == pytest.approx(0.9)
    if wrap == "RewardShaping":
        assert a[-1][4] == {"task": 1.0, "bonus": 10.0} and a[-1][1] == 11.0


def test_gym_make_wrappers_have_an_async_face():
    made = make()
    assert type(made) is TimeLimit  # Gymnasium's own stack, nothing of ours (a spec's additional wrapper breaks
    # gym.make_vec's vector_entry_point mode)
    env = async_face(made)
    assert isinstance(env, AsyncWrapper) and env.env is made and async_face(env) is env

    async def run():
        with pytest.raises(ResetNeeded):
            await env.astep("<answer>5</answer>")  # OrderEnforcing, on the async face too
        await env.areset(options={"task_id": "add"})
        out = await env.astep("<answer>5</answer>")
        await env.aclose()
        return out

    obs, r, te, tr, info = asyncio.run(run())
    assert (r, te, tr) == (1.0, True, False)
    assert env.unwrapped._closed


class SyncOnly(gym.Wrapper):
    def step(self, action):
        obs, r, te, tr, info = self.env.step(action)
        return obs, r + 100, te, tr, info


def test_a_wrapper_without_async_face_is_refused_loudly():
    env = SyncOnly(make())
    with pytest.raises(AsyncFaceError, match="SyncOnly overrides step"):
        check_async(env)
    with pytest.raises(AsyncFaceError, match="SyncOnly"):
        async_face(env)
    from aworld_gym.rollout.collect import collect
    from aworld_gym.rollout.policies.plan import PlanPolicy

    with pytest.raises(AsyncFaceError):
        collect(lambda: SyncOnly(make()), PlanPolicy(), episodes=1, progress=False)
    env.close()


@pytest.mark.parametrize("face", ["sync", "async"])
def test_max_episode_steps_truncates_with_turn_limit_and_runs_episode_hooks(face):
    seen = []

    def at_end(ctx):
        seen.append((len(ctx.turns), ctx.truncation_reason))
        return {"end": -1.0}

    env = make(max_episode_steps=2, reward_hooks=[aworld_gym.Hook(at_end, on="episode")])
    if face == "sync":  # the sync face cannot see a limit given to gym.make: TurnLimit tells the env (docs)
        env = TurnLimit(env)
    actions = [tc("add", a=1, b=1), tc("add", a=1, b=2), tc("add", a=1, b=3)]
    rows = sync_run_actions(env, actions) if face == "sync" else async_run_actions(env, actions)
    assert len(rows) == 2
    obs, r, te, tr, info = rows[-1]
    assert (te, tr, info["truncation_reason"]) == (False, True, "turn_limit")
    assert info["reward_components"] == {"end": -1.0}
    assert seen == [(2, "turn_limit")]  # the whole turn log, the last turn included


def sync_run_actions(env, actions):
    env.reset(options={"task_id": "add"})
    rows = []
    for a in actions:
        rows.append(env.step(a))
        if rows[-1][2] or rows[-1][3]:
            break
    env.close()
    return rows


def async_run_actions(env, actions):
    env = async_face(env)

    async def run():
        await env.areset(options={"task_id": "add"})
        rows = []
        for a in actions:
            rows.append(await env.astep(a))
            if rows[-1][2] or rows[-1][3]:
                break
        await env.aclose()
        return rows

    return asyncio.run(run())


def test_a_longer_max_episode_steps_extends_the_registered_limit():
    env = TurnLimit(make(max_episode_steps=25))  # the id's default is 20; on the sync face TurnLimit tells the env
    env.reset(options={"task_id": "add"})
    for _ in range(24):
        assert env.step(tc("add", a=1, b=1))[3] is False
    assert env.step(tc("add", a=1, b=1))[4]["truncation_reason"] == "turn_limit"
    env.close()


def test_the_sync_face_of_gym_make_ends_at_the_registered_limit_itself():
    """Nothing tells the env its limit on the sync face (Gymnasium's TimeLimit is left as it is): it takes its id's
    registered max_episode_steps, so the last turn is labelled turn_limit by the env, as on the async face."""
    limit = gym.spec("AWorld/MCP-v0").max_episode_steps
    env = make()
    env.reset(seed=0, options={"task_id": "add"})
    turns = 0
    while turns < limit + 1:
        _, _, te, tr, info = env.step("no call here")
        turns += 1
        if te or tr:
            break
    env.close()
    assert (turns, te, tr, info.get("truncation_reason")) == (limit, False, True, "turn_limit")


def test_turn_limit_tells_the_env_a_limit_given_to_gym_make():
    """A user's TurnLimit over gym.make(..., max_episode_steps=2) tells the env 2 on the sync face too."""
    env = TurnLimit(make(max_episode_steps=2))
    env.reset(seed=0, options={"task_id": "add"})
    env.step("no call here")
    _, _, te, tr, info = env.step("no call here")
    env.close()
    assert (te, tr, info.get("truncation_reason")) == (False, True, "turn_limit")
