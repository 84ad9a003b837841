"""GRPO groups on the trainer faces: which samples of a TRL batch belong together, each member's training reward
within its own group, and :func:`member_of`, the one enter/run/leave idiom of the faces that run one sample per
coroutine (verl, slime, OpenRLHF, AReaL). The groups themselves are collected, and their reward hooks run, by
:mod:`aworld_gym.rollout.groups`, as for every other face."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from aworld_gym.core.trajectory import Trajectory
from aworld_gym.rollout.groups import finish_group, gate, training_rewards
from aworld_gym.trainers.seam.token_rollout import prompt_text

T = TypeVar("T")


def group_keys(prompts: Sequence[Any], num_generations: int | None) -> list[str]:
    """The GRPO group of each prompt of a batch: TRL repeats each prompt ``num_generations`` times in a row, so
    consecutive blocks of identical prompts are groups (two groups of one prompt stay apart); otherwise, the text."""
    texts = [prompt_text(p) for p in prompts]
    g = int(num_generations or 0)
    if g > 1 and len(texts) % g == 0 and all(len(set(texts[i : i + g])) == 1 for i in range(0, len(texts), g)):
        return [f"{i // g}:{t}" for i, t in enumerate(texts)]
    return texts


def _by_key(keys: Sequence[Any]) -> dict[Any, list[int]]:
    by_key: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        by_key.setdefault(key, []).append(i)
    return by_key


def rewards_by_group(keys: Sequence[Any], members: Sequence[Trajectory]) -> list[float]:
    """:func:`~aworld_gym.rollout.groups.training_rewards` of a batch that holds several groups, each member's taken
    within its own group (``keys[i]``: member ``i``'s group): a masked member gets the mean of its group's live
    members, never of the whole batch's."""
    out = [0.0] * len(members)
    for idxs in _by_key(keys).values():
        for i, reward in zip(idxs, training_rewards([members[i] for i in idxs]), strict=True):
            out[i] = reward
    return out


def finish_groups(
    keys: Sequence[Any], members: Sequence[Trajectory], rubrics: Sequence[Any], void_policy: str = "mask"
) -> list[float]:
    """The group's work on a batch that holds several whole groups, for faces that see the batch only at the end
    (ms-swift's reward function): :func:`~aworld_gym.rollout.groups.finish_group` once per group (``keys[i]``:
    member ``i``'s group; the group's rubric: its first member's ``rubrics[i]``), then :func:`rewards_by_group`."""
    for idxs in _by_key(keys).values():
        finish_group(rubrics[idxs[0]], [members[i] for i in idxs], void_policy=void_policy)
    return rewards_by_group(keys, members)


async def member_of(
    key: str | None, episode: Callable[[], Awaitable[tuple[Trajectory, Any, T]]], void_policy: str = "mask"
) -> tuple[Trajectory, float, T]:
    """Run one sample's episode as a member of GRPO group ``key`` (``None``: a group of its own) on this loop's
    :func:`~aworld_gym.rollout.groups.gate`, for faces whose trainer runs each sample in its own coroutine.

    The member enters before its first await (so every member on this loop has entered when one leaves), leaves with
    its trajectory (or with nothing when ``episode`` raised, which is re-raised), and waits for the complete group:
    the env's group hooks run once on it and the void policy applies.

    Args:
        key: the group (the trainer's group id); members of one group share it.
        episode: ``() -> (trajectory, the env's group rubric or None, anything the face needs back)``.
        void_policy: ``"mask"``, ``"retry"`` or ``"zero"``.

    Returns:
        The trajectory, its training reward (a masked member: its group's live mean) and ``episode``'s third value.
    """
    if key is None:
        traj, rubric, extra = await episode()
        members = [traj]
        finish_group(rubric, members, void_policy=void_policy)
    else:
        groups = gate(void_policy)
        groups.enter(key)
        try:
            traj, rubric, extra = await episode()
        except BaseException:
            await groups.leave(key, None)
            raise
        members = await groups.leave(key, traj, rubric)
    return traj, training_rewards(members)[next(i for i, t in enumerate(members) if t is traj)], extra
