"""The episode stepped from outside, on both faces: :class:`TextEpisode` (awaited) and :class:`SyncTextEpisode`
(called) run one loop, so the same turns give the same trajectory, and a server killed mid-episode ends both as
void with the same ending."""

from __future__ import annotations

import asyncio

import gymnasium as gym

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.trainers.seam import EnvPool, SyncTextEpisode, TextEpisode, Trajectory, Turn
from tests.helpers import ANSWER, CALL, CRASH, demo_env_kwargs


def pool(transport: str = "inprocess") -> EnvPool:
    kwargs = demo_env_kwargs(4, transport)
    return EnvPool(lambda: gym.make("AWorld/MCP-v0", **kwargs))


def on_sync(p: EnvPool, script: list[str]) -> tuple[list[Turn], Trajectory]:
    episode = SyncTextEpisode(p, "AWorld/MCP-v0", "test")
    turns = [episode.start(0, {"task_id": "add-2"})]
    for text in script:
        if episode.running:
            turns.append(episode.step(text))
    episode.close()
    return turns, episode.trajectory


def on_async(p: EnvPool, script: list[str]) -> tuple[list[Turn], Trajectory]:
    async def run() -> tuple[list[Turn], Trajectory]:
        episode = TextEpisode(p, "AWorld/MCP-v0", "test")
        turns = [await episode.start(0, {"task_id": "add-2"})]
        for text in script:
            if episode.running:
                turns.append(await episode.step(text))
        await episode.close()
        await p.aclose()
        return turns, episode.trajectory

    return asyncio.run(run())


def facts(turns: list[Turn], traj: Trajectory) -> tuple:
    return ([(t.observation, t.reward, t.done, [m["role"] for m in t.messages]) for t in turns],
            traj.status, traj.termination, traj.reward, [t["action"] for t in traj.turns], traj.task_id)  # fmt: skip


def test_both_faces_give_the_same_turns_and_trajectory():
    p = pool()
    sync = facts(*on_sync(p, [CALL, ANSWER]))
    p.close()
    assert sync == facts(*on_async(pool(), [CALL, ANSWER]))
    steps, status, termination, reward, actions, task_id = sync
    assert (status, termination, task_id, actions) == ("ok", "answer", "add-2", [CALL, ANSWER])
    assert reward == 1.0 and [s[1] for s in steps] == [0.0, 0.0, 1.0] and [s[2] for s in steps] == [False] * 2 + [True]
    assert steps[0][3] == ["system", "user"] and steps[1][3] == ["tool"]  # the env's opening, then its tool answer


def test_a_server_killed_mid_episode_is_void_on_both_faces():
    p = pool("stdio")
    try:
        sync = facts(*on_sync(p, [CRASH, ANSWER]))
    finally:
        p.close()
    assert sync == facts(*on_async(pool("stdio"), [CRASH, ANSWER]))
    steps, status, termination, reward, actions, _ = sync
    assert status == "void" and termination == "env_crash" and actions == [CRASH]  # never stepped past the crash
    assert len(steps) == 2 and steps[-1][2] is True and reward == 0.0


def test_a_sync_episode_keeps_its_env_across_starts_and_gives_it_back():
    p = pool()
    episode = SyncTextEpisode(p, "AWorld/MCP-v0", "test")
    for _ in range(3):
        episode.start(0, {"task_id": "add-2"})
        episode.step(ANSWER)
    episode.close()
    assert (p.made, episode.env, episode.trajectory.reward) == (1, None, 1.0)  # one env for three episodes, back
    p.close()
