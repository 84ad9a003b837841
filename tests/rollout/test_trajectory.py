"""The Trajectory and the one episode driver: statuses, one serialisation, the ledger, both faces, context limits."""

import asyncio
import json
import pickle

import gymnasium as gym
import pytest

import aworld_gym  # noqa: F401
from aworld_gym.core.faces import async_face
from aworld_gym.core.trajectory import (
    RewardLedger,
    Source,
    Termination,
    TokenData,
    Trajectory,
    status_of,
    void_counts,
)
from aworld_gym.rollout.driver import arun_episode, run_episode
from aworld_gym.rollout.policies import ContextLimit
from aworld_gym.rollout.policies.plan import PlanPolicy
from tests.helpers import SHAPED, demo_env_kwargs, shaped_env


@pytest.mark.parametrize(
    ("termination", "score", "terminated", "status"),
    [
        ("answer", 1.0, True, "ok"),
        ("answer", None, True, "ok"),  # an answer to a task without a reference
        ("answer", 0.0, True, "failed"),  # a wrong answer: the model's fault, trained on
        ("answer", 0.5, True, "failed"),
        ("turn_limit", None, False, "failed"),
        ("token_budget", None, False, "failed"),
        ("context_limit", None, False, "failed"),
        ("length", None, False, "failed"),
        ("env_crash", None, False, "void"),  # infrastructure's fault: masked
        ("env_error", None, False, "void"),
        ("policy_error", None, False, "void"),
        ("tool_timeout", None, False, "void"),
    ],
)
def test_status_of_every_ending(termination, score, terminated, status):
    assert status_of(termination, score, terminated) == status
    assert termination in Termination.ALL


def test_a_record_reads_back_as_the_same_trajectory():
    traj = Trajectory("AWorld/MCP-v0", task_id="t", task_meta={"level": 1}, prompt="p", seed=3, sample=2, group="g")
    traj.turns.append({"turn": 1, "action": "a", "reward": 1.0, "messages": [{"role": "user"}], "step_time_s": 0.1})
    traj.ledger.add({"task": 1.0, "fmt": -0.5}, total=0.5, source=Source.OUTER)
    traj.ledger.add_metrics({"m": 2.0}, {"hook": "boom"})
    traj.score, traj.answer, traj.terminated, traj.termination = 1.0, "12", True, "answer"
    traj.tokens = TokenData([1, 2], [3, 4], [-0.1, 0.0], [1, 0], 1, 1)
    traj.extra["attempts"] = 2
    rec = traj.to_record()
    assert json.loads(json.dumps(rec)) == rec  # JSON-able
    assert "messages" not in rec["turns"][0] and "step_time_s" not in rec["turns"][0]
    assert rec["reward"] == 0.5 and rec["reward_components"] == {"task": 1.0, "fmt": -0.5}
    assert rec["status"] == "ok" and rec["weight"] == 1.0 and rec["num_turns"] == 1 and rec["attempts"] == 2
    back = Trajectory.from_record(rec)
    assert back.to_record() == rec and back.tokens == traj.tokens and back.ledger == traj.ledger
    assert traj["reward"] == 0.5 and traj.get("missing", 7) == 7  # reads as its record


class CountingTrajectory(Trajectory):
    """Counts its record builds."""

    builds = 0

    def to_record(self):
        self.builds += 1
        return super().to_record()


@pytest.mark.parametrize("grouped", [False, True])
def test_reading_a_key_gives_the_records_value_without_building_the_record(grouped):
    traj = CountingTrajectory("AWorld/MCP-v0", task_id="t", task_meta={"level": 1}, seed=3, group="g")
    for i in range(200):
        traj.turns.append({"turn": i, "action": "a" * 100, "messages": [{"role": "user"}], "step_time_s": 0.1})
    traj.ledger.add({"task": 1.0}, total=1.0, source=Source.OUTER)
    traj.score, traj.terminated, traj.termination = 1.0, True, "answer"
    traj.extra.update({"attempts": 2, "reward": 99.0, "prompt": "from extra", "ledger": "x"})  # no field clobbered
    if grouped:
        traj.prompt, traj.screenshot, traj.group_complete = "p", "s.png", True
        traj.tokens = TokenData([1], [2], [0.0], [1], 1, 0)
    keys = [*traj.to_record(), "missing", "tokens", "group_reward_components", "group_complete"]
    traj.builds = 0
    rec = Trajectory.to_record(traj)
    for key in keys:
        assert traj.get(key, "absent") == rec.get(key, "absent"), key
        if key in rec:
            assert traj[key] == rec[key]
        else:
            with pytest.raises(KeyError):
                traj[key]
    assert traj.builds == 0  # every read above came from the fields (before: one whole record per read)
    assert traj["reward"] == 1.0 and traj["prompt"] == ("p" if grouped else "from extra") and traj["ledger"] == "x"
    traj["task_meta"]["level"] = 9  # a read is a copy, as the record's is
    assert traj.task_meta == {"level": 1} and "messages" not in traj["turns"][0]


def test_the_ledger_sums_what_it_is_given_by_source():
    ledger = RewardLedger()
    assert ledger.add({"a": 1.0, "b": 2.0}, source=Source.ENV) == 3.0
    assert ledger.add({"a": 1.0}, total=10.0, source=Source.OUTER) == 10.0  # a transform shows in the total only
    assert ledger.total == 13.0 and ledger.components == {"a": 2.0, "b": 2.0}
    assert ledger.share(Source.ENV).total == 3.0 and ledger.share(Source.OUTER).components == {"a": 1.0}
    assert ledger.share(Source.GROUP).total == 0.0 and ledger == RewardLedger(13.0, {"a": 2.0, "b": 2.0})


def test_a_turns_change_is_added_once_and_a_replaced_component_leaves():
    ledger = RewardLedger()
    ledger.change({}, {"task": 1.0, "format": 0.0}, 1.0, source=Source.ENV)  # the env logs its turn
    ledger.change({"task": 1.0, "format": 0.0}, {"task": 1.0, "format": 0.0}, 0.0, source=Source.OUTER)  # same
    assert ledger.sources.keys() == {Source.ENV} and ledger.components == {"task": 1.0, "format": 0.0}
    ledger.change({"task": 1.0, "format": 0.0}, {"only": 0.25}, -0.75, source=Source.SHAPING)  # replace=True
    assert ledger.total == 0.25 and ledger.components == {"only": 0.25}
    assert ledger.share(Source.ENV).total == 1.0 and ledger.share(Source.SHAPING).total == -0.75


class Doubled(gym.RewardWrapper):
    """A user's own Gymnasium reward wrapper, outermost."""

    def reward(self, reward):
        return 2.0 * float(reward)


def written_once(env, traj):
    ledger = env.unwrapped.ledger
    assert traj.ledger is ledger and traj.turns is env.unwrapped.turns  # the env's, no second copy
    assert traj.reward == 22.0 == sum(t["reward"] for t in traj.turns)  # what the outermost env returned
    assert ledger.components == SHAPED and traj.turns[-1]["reward_components"] == SHAPED
    assert ledger.share(Source.ENV).total == env.unwrapped.episode_reward == 1.0  # wrappers not included
    assert ledger.share(Source.SHAPING).components == {"bonus": 10.0}
    assert ledger.share(Source.OUTER).total == 11.0 and ledger.share(Source.OUTER).components == {}
    back = pickle.loads(pickle.dumps(traj))  # how a process or Ray engine ships it back
    assert back.reward == 22.0 and back.ledger.share(Source.ENV).total == 1.0
    read = Trajectory.from_record(traj.to_record())  # a record keeps the total and the components
    assert read.ledger == traj.ledger and read.reward == 22.0


def test_the_episode_reward_is_written_once_in_one_ledger():
    env = Doubled(shaped_env())  # the env's rubric, RewardShaping's bonus, then a transform of the sum
    try:
        written_once(env, run_episode(env, PlanPolicy(), options={"task_index": 1}))
    finally:
        env.close()

    async def on_the_async_face():
        env = Doubled(shaped_env())
        try:
            written_once(env, await arun_episode(env, PlanPolicy(), options={"task_index": 1}))
        finally:
            await async_face(env).aclose()

    asyncio.run(on_the_async_face())


def test_void_counts_by_kind():
    trajs = [Trajectory(termination=t, truncated=True) for t in ("env_crash", "env_crash", "turn_limit", "env_error")]
    assert void_counts(trajs) == {"void/rate": 0.75, "void/env_crash": 2.0, "void/env_error": 1.0}
    assert void_counts([t.to_record() for t in trajs]) == void_counts(trajs)


def test_the_turns_are_the_envs_turn_log():
    env = shaped_env()
    try:
        traj = run_episode(env, PlanPolicy(), options={"task_index": 1})
        assert traj.turns is env.unwrapped.turns  # no second copy
        assert traj.turns[-1]["messages"]  # the env's own entries (the chat messages are the env's)
        assert traj.status == "ok" and traj.reward == 11.0 and traj.env_id == "AWorld/MCP-v0"
        assert traj.reward == sum(t["reward"] for t in traj.turns)
    finally:
        env.close()


def test_both_faces_give_the_same_trajectory():
    env = gym.make("AWorld/MCP-v0", **demo_env_kwargs(4))
    try:
        sync = run_episode(env, PlanPolicy(), seed=1, options={"task_index": 2}).to_record()
        asyn = asyncio.run(arun_episode(env, PlanPolicy(), seed=1, options={"task_index": 2})).to_record()
    finally:
        env.close()

    def same(rec):
        drop = ("episode_id", "started_at", "timings")
        turns = [{k: v for k, v in t.items() if not k.endswith("_s")} for t in rec["turns"]]
        for t in turns:
            for r in t["tool_results"]:
                r.pop("latency_s", None)
        return {**{k: v for k, v in rec.items() if k not in drop}, "turns": turns}

    assert same(sync) == same(asyn) and sync["status"] == "ok"


class Talker:
    """A policy with a context: each turn's prompt grows; it never answers."""

    name = "talker"

    def __init__(self, limit):
        self.context_limit = limit

    def act(self, env, obs, info):
        return "thinking " * 20


def test_a_text_policy_that_would_overflow_its_context_ends_with_context_limit():
    env = gym.make("AWorld/MCP-v0", **demo_env_kwargs(2))
    count = lambda messages: sum(len(str(m.get("content") or "")) for m in messages) // 4  # noqa: E731
    try:
        env.reset(options={"task_index": 0})
        first = count(env.unwrapped.messages)  # the system prompt and the task
        limit = ContextLimit(max_model_len=first + 50 + 120, max_new_tokens=50, count=count, overflow_reward=-1.0)
        traj = run_episode(env, Talker(limit), options={"task_index": 0})
    finally:
        env.close()
    assert traj.termination == "context_limit" and traj.status == "failed" and traj.truncated
    assert 0 < traj.num_turns < 20  # a few turns fit, then the check ended it before the model was asked
    assert traj.ledger.components["context_limit"] == -1.0


class Cut:
    name = "cut"

    def act(self, env, obs, info):
        from aworld_gym.core.actions import Action, Sample

        return Action('<tool_call>{"name": "add", "argum', sample=Sample(token_ids=[1, 2], finish_reason="length"))


def test_a_reply_cut_off_by_max_tokens_is_its_own_ending_not_a_parse_error():
    env = gym.make("AWorld/MCP-v0", **demo_env_kwargs(2))
    try:
        traj = run_episode(env, Cut(), options={"task_index": 0})
    finally:
        env.close()
    assert traj.termination == "length" and traj.status == "failed" and traj.num_turns == 0
    assert traj.extra["cut_reply"].startswith("<tool_call>")
    # the cut reply's sample is kept (not a turn: never stepped), so a learner can train on it
    assert traj.extra["cut_sampled"]["token_ids"] == [1, 2] and traj.to_record()["cut_sampled"]["token_ids"] == [1, 2]


def test_a_server_killed_mid_episode_is_void_and_the_run_goes_on():
    from aworld_gym.rollout.collect import collect

    summary = collect("AWorld/MCP-v0", PlanPolicy(), episodes=6, env_kwargs=demo_env_kwargs(6, "stdio", crash_every=3),
                      concurrency=2, progress=False)  # fmt: skip
    assert summary.void == 2 and summary.terminations["env_crash"] == 2
    assert summary.successes == 4


def test_stream_groups_takes_collects_keywords_and_retries_void_episodes():
    from aworld_gym import stream_groups

    kwargs = demo_env_kwargs(4, "stdio", crash_every=4)  # add-3's plan kills its server first
    groups = list(stream_groups("AWorld/MCP-v0", PlanPolicy(), episodes=8, group_size=2, env_kwargs=kwargs,
                                concurrency=2, void_policy="retry", retry_void=1))  # fmt: skip
    trajs = [t for g in groups for t in g]
    assert len(trajs) == 8 and all(len({t.task_id for t in g}) == 1 for g in groups)
    void = [t for t in trajs if t.void]
    assert [t.task_id for t in void] == ["add-3", "add-3"]  # run twice each (it always crashes), then masked
    assert all(t.extra["attempts"] == 2 and t.weight == 0.0 for t in void)
    assert all(t.weight == 1.0 and "attempts" not in t.extra for t in trajs if not t.void)


def test_the_report_counts_void_episodes_by_kind():
    from aworld_gym.report.stats import summarize_records
    from aworld_gym.report.tables import render

    records = [
        Trajectory("x", task_id="a", termination="answer", terminated=True, score=1.0).to_record(),
        Trajectory("x", task_id="a", termination="turn_limit", truncated=True).to_record(),
        Trajectory("x", task_id="b", termination="env_crash", truncated=True).to_record(),
        {"task_id": "b", "termination": "env_error", "truncated": True},  # an older record without a status
    ]
    s = summarize_records(records)
    assert s["statuses"] == {"ok": 1, "failed": 1, "void": 2}
    assert s["void"] == {"rate": 0.5, "by_kind": {"env_crash": 1, "env_error": 1}}
    text = render(s)
    assert "void: env_crash" in text and "statuses" in text
