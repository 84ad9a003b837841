"""GRPO groups: one collector for every engine and trainer face, and the one place group reward hooks run.

A group is complete when each of its expected members has a Trajectory. :func:`finish_group` then runs the env's
group reward hooks once, on the members that are not ``void`` (an infrastructure failure says nothing about the
model), adds their shares to each member's ledger, marks ``group_complete``, and applies the void policy:

- ``"mask"`` (the default): a void member gets loss weight 0 and, for trainers whose baseline is the group's mean,
  the mean reward of the others (:func:`training_rewards`), so it moves neither the loss nor the baseline;
- ``"retry"``: the face re-runs a void member (``retry_void`` times, see :func:`~aworld_gym.rollout.pool.run_pooled`);
  one still void after that is masked;
- ``"zero"``: trained on as reward 0 (the behaviour of trainers that know nothing of infrastructure).

:class:`GroupCollector` is sync (the collector, TRL batches); :class:`GroupGate` is its async face for trainers that
run one sample per coroutine (verl's agent loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aworld_gym.base.errors import ConfigError
from aworld_gym.core.trajectory import VOID_POLICIES, Source, Trajectory

Run = Callable[[Awaitable[Any]], Any]


def check_void_policy(void_policy: str) -> str:
    if void_policy not in VOID_POLICIES:
        raise ConfigError(f"void_policy must be one of {VOID_POLICIES}, not {void_policy!r}")
    return void_policy


def finish_group(
    rubric: Any, members: Sequence[Trajectory], *, size: int | None = None, void_policy: str = "mask",
    run: Run | None = None,
) -> None:  # fmt: skip
    """Run the group hooks once on the live members, mark completeness (``size``: the planned group size), mask the
    void members (see the module's docstring)."""
    for traj, scores in zip(members, group_shares(rubric, members, run), strict=True):
        if scores is not None:
            traj.ledger.add(scores.components, source=Source.GROUP)
            traj.ledger.add_metrics(scores.metrics, scores.errors)
            traj.group_reward_components = dict(scores.components)
    if size is not None or (rubric is not None and getattr(rubric, "group", None)):
        for traj in members:
            traj.group_complete = len(members) == (size if size is not None else len(members))
    mask_void(members, void_policy)


def group_shares(rubric: Any, members: Sequence[Trajectory], run: Run | None = None) -> list[Any]:
    """The group hooks' :class:`~aworld_gym.core.rewards.Scores` for each member (``None`` for a void member, and
    for all when the rubric has no group hooks): the one place they run."""
    from aworld_gym.core.group_rewards import score_group

    live = [i for i, t in enumerate(members) if not t.void]
    out: list[Any] = [None] * len(members)
    if rubric is None or not getattr(rubric, "group", None) or not live:
        return out
    if run is None:
        from aworld_gym.rollout.envs import run_coroutine as run
    records = [members[i].to_record() for i in live]
    for i, scores in zip(live, score_group(rubric, records, run), strict=True):
        out[i] = scores
    return out


def mask_void(members: Sequence[Trajectory], void_policy: str = "mask") -> None:
    """Loss weight 0 for void members unless the policy is ``"zero"``."""
    for traj in members:
        traj.weight = 0.0 if traj.void and void_policy != "zero" else 1.0


def training_rewards(members: Sequence[Trajectory]) -> list[float]:
    """The reward a trainer sees per member: a masked (weight 0) member gets the mean of the others, so that a group
    baseline (GRPO's mean) is what it would be without it; all masked: 0."""
    live = [t.reward for t in members if t.weight > 0]
    mean = sum(live) / len(live) if live else 0.0
    return [t.reward if t.weight > 0 else mean for t in members]


@dataclass
class _Open:
    expected: int = 0
    members: list[Trajectory] = field(default_factory=list)


class GroupCollector:
    """Holds Trajectories by group key until each group is complete.

    Args:
        rubric: the env's reward rubric (its ``group`` hooks run on each complete group), or ``None``.
        void_policy: ``"mask"``, ``"retry"`` or ``"zero"``.
        sizes: the planned size of each group (``group_complete`` is False for one cut short).
    """

    def __init__(self, rubric: Any = None, void_policy: str = "mask", sizes: dict[Any, int] | None = None) -> None:
        self.rubric, self.void_policy = rubric, check_void_policy(void_policy)
        self.sizes = dict(sizes or {})
        self._open: dict[Any, _Open] = {}

    def expect(self, key: Any, n: int = 1) -> None:
        """``n`` more members of group ``key`` will come."""
        self._open.setdefault(key, _Open()).expected += n

    def add(self, key: Any, traj: Trajectory, run: Run | None = None) -> list[Trajectory] | None:
        """Hand in a member; returns its whole group, finished, once the group is complete."""
        return self._finished(key, self.take(key, traj), run)

    def drop(self, key: Any, run: Run | None = None) -> list[Trajectory] | None:
        """A member that will never come (it failed without a trajectory)."""
        return self._finished(key, self.take(key, None), run)

    def take(self, key: Any, traj: Trajectory | None) -> list[Trajectory] | None:
        """Hand in a member (``None``: one that will never come) without finishing anything: once its group is
        complete, the group's members, taken out of the collector, for the caller to finish (:class:`GroupGate`
        finishes it in a worker thread)."""
        group = self._open.setdefault(key, _Open())
        if traj is None:
            group.expected -= 1
        else:
            group.members.append(traj)
        if len(group.members) < group.expected:
            return None
        del self._open[key]
        return group.members

    def _finished(self, key: Any, members: list[Trajectory] | None, run: Run | None) -> list[Trajectory] | None:
        if members is not None:
            finish_group(self.rubric, members, size=self.sizes.get(key), void_policy=self.void_policy, run=run)
        return members

    def flush(self, run: Run | None = None) -> list[list[Trajectory]]:
        """The groups still open (an interrupted run), finished as they are (``group_complete`` False)."""
        out = []
        for key in list(self._open):
            group = self._open.pop(key)
            if group.members:
                size = self.sizes.get(key, group.expected)
                finish_group(self.rubric, group.members, size=size, void_policy=self.void_policy, run=run)
                out.append(group.members)
        return out

    def __len__(self) -> int:
        return len(self._open)


class GroupGate:
    """The async face of :class:`GroupCollector`: each member awaits its complete group.

    A member *enters* before its first await (so when any member leaves, every member on this loop has entered) and
    *leaves* with its trajectory (``None``: it failed without one); every member gets the finished group. Group hooks
    that may be slow run in a worker thread.
    """

    def __init__(self, void_policy: str = "mask") -> None:
        self.void_policy = check_void_policy(void_policy)
        self._collector = GroupCollector(void_policy=void_policy)
        self._done: dict[str, asyncio.Future[list[Trajectory]]] = {}

    def enter(self, key: str) -> None:
        self._collector.expect(key)
        if key not in self._done:
            self._done[key] = asyncio.get_running_loop().create_future()

    async def leave(self, key: str, traj: Trajectory | None, rubric: Any = None) -> list[Trajectory]:
        done = self._done[key]
        members = self._collector.take(key, traj)
        if members is not None and not done.done():
            self._done.pop(key, None)
            try:
                if members:
                    await asyncio.to_thread(finish_group, rubric, members, void_policy=self.void_policy)
            finally:
                done.set_result(members)  # the others never wait forever (a strict hook that raised)
        return await asyncio.shield(done)

    def __len__(self) -> int:
        return len(self._collector)


_GATES: dict[Any, GroupGate] = {}


def gate(void_policy: str = "mask") -> GroupGate:
    """The gate of the running event loop."""
    loop = asyncio.get_running_loop()
    if loop not in _GATES:
        for old in [k for k in _GATES if k.is_closed()]:
            del _GATES[old]
        _GATES[loop] = GroupGate(void_policy)
    return _GATES[loop]
