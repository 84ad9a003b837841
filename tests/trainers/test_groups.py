"""The group gate of one-sample-per-coroutine trainers (verl): groups complete, failures never hang the rest."""

import asyncio

import pytest

from aworld_gym.core.rewards import Hook, Rubric
from aworld_gym.core.trajectory import RewardLedger, Trajectory
from aworld_gym.rollout.groups import gate


def traj(reward, termination="answer"):
    t = Trajectory("x", ledger=RewardLedger(total=reward), terminated=termination == "answer", score=1.0)
    t.termination = termination
    return t


def ranks(group):
    order = sorted(range(len(group)), key=lambda i: -group[i]["reward"])
    return [float(order.index(i)) for i in range(len(group))]


def run_group(rewards, rubric, fail=()):
    async def member(i, r):
        g = gate()
        g.enter("u")
        await asyncio.sleep(0.01 * (len(rewards) - i))  # finish in reverse order
        member = None if i in fail else traj(r)
        await g.leave("u", member, rubric)
        return None if member is None else member.group_reward_components

    async def main():
        out = await asyncio.gather(*(member(i, r) for i, r in enumerate(rewards)), return_exceptions=True)
        return out, len(gate())

    return asyncio.run(main())


def test_every_member_gets_its_share_and_failed_members_do_not_count():
    out, open_groups = run_group([0.0, 3.0, 1.0, 9.0], Rubric([Hook(ranks, on="group", name="rank")]), fail={3})
    assert [o["rank"] for o in out[:3]] == [2.0, 0.0, 1.0] and out[3] is None
    assert open_groups == 0


def test_a_strict_hook_that_raises_does_not_hang_the_group():
    def broken(group):
        raise RuntimeError("group hook bug")

    out, open_groups = asyncio.run(asyncio.wait_for(_strict(broken), 5))
    assert sum(isinstance(o, RuntimeError) for o in out) == 1 and out.count(None) == 2
    assert open_groups == 0


async def _strict(hook):
    async def member(i):
        g = gate()
        g.enter("s")
        await asyncio.sleep(0.01 * i)
        mine = traj(float(i))
        await g.leave("s", mine, Rubric([Hook(hook, on="group")], strict=True))
        return None if not mine.group_reward_components else mine.group_reward_components

    out = await asyncio.gather(*(member(i) for i in range(3)), return_exceptions=True)
    return out, len(gate())


def test_void_members_are_left_out_of_the_group_hooks_and_masked():
    from aworld_gym.rollout.groups import GroupCollector, training_rewards

    seen = []

    def sizes(group):
        seen.append(len(group))
        return [1.0] * len(group)

    collector = GroupCollector(Rubric([Hook(sizes, on="group", name="g")]))
    members = [traj(1.0), traj(0.0, "env_crash"), traj(0.0)]
    collector.expect("k", 3)
    assert collector.add("k", members[0]) is None and collector.add("k", members[1]) is None
    assert collector.add("k", members[2]) == members
    assert seen == [2]  # the hook ran once, on the two live members
    assert [m.weight for m in members] == [1.0, 0.0, 1.0] and members[1].status == "void"
    assert [m.reward for m in members] == [2.0, 0.0, 1.0]
    assert training_rewards(members) == [2.0, 1.5, 1.0]  # the masked one gets the others' mean: the baseline holds
    zero = GroupCollector(void_policy="zero")
    zero.expect("k")
    (only,) = zero.add("k", traj(0.0, "env_error"))
    assert only.weight == 1.0 and training_rewards([only]) == [0.0]


def test_group_reward_sees_each_rollouts_return():
    pytest.importorskip("trl")
    from aworld_gym.trainers.trl import environment_factory, group_reward
    from tests.helpers import grouped_env

    cls = environment_factory(grouped_env)
    assert cls.__name__ == "AworldMcpV0Tools"
    envs = [cls(), cls()]
    try:
        for e, answer in zip(envs, ["1.0", "7"], strict=True):
            e.reset(task_id="add-0")
            e.add(a=0, b=1)
            e.answer(answer=answer)
        assert [e.get_reward() for e in envs] == [pytest.approx(11.0), pytest.approx(10.0)]  # +10 for any answer
        extra = group_reward([None, None], environments=envs)
        # count_group: size 2 (x0.1) for both; rank 0 for the solved one, rank 1 (x0.1) for the other
        assert extra == [pytest.approx(0.2), pytest.approx(0.3)]
    finally:
        for e in envs:
            e._close()


def test_a_masked_member_gets_its_own_groups_mean_in_a_trl_batch(tiny):
    """TRL's batch holds several GRPO groups: a void member's training reward is its own group's live mean (1.0
    here), not the whole batch's (which was (1 + 0 + 0) / 3)."""
    pytest.importorskip("trl")
    from transformers import AutoTokenizer

    from aworld_gym.rollout.groups import mask_void
    from aworld_gym.rollout.tokens import ChatTokens
    from aworld_gym.trainers.seam.groups import rewards_by_group
    from aworld_gym.trainers.trl import batch_of

    members = [traj(1.0), traj(0.0, "env_crash"), traj(0.0), traj(0.0)]
    mask_void(members)
    keys = ["a", "a", "b", "b"]
    assert rewards_by_group(keys, members) == [1.0, 1.0, 0.0, 0.0]
    chat = ChatTokens(AutoTokenizer.from_pretrained(tiny))
    out = batch_of(members, chat, ["p", "p", "q", "q"], keys)
    assert out["reward"] == [1.0, 1.0, 0.0, 0.0] and out["weight"] == [1.0, 0.0, 1.0, 1.0]
