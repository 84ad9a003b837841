"""GRPO groups of a TRL batch: which samples belong together (the groups themselves are collected, and their reward
hooks run, by :class:`~aworld_gym.rollout.groups.GroupCollector`, as for every other face)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aworld_gym.core.trajectory import Trajectory
from aworld_gym.rollout.groups import training_rewards
from aworld_gym.trainers.token_rollout import prompt_text


def group_keys(prompts: Sequence[Any], num_generations: int | None) -> list[str]:
    """The GRPO group of each prompt of a batch: TRL repeats each prompt ``num_generations`` times in a row, so
    consecutive blocks of identical prompts are groups (two groups of one prompt stay apart); otherwise, the text."""
    texts = [prompt_text(p) for p in prompts]
    g = int(num_generations or 0)
    if g > 1 and len(texts) % g == 0 and all(len(set(texts[i : i + g])) == 1 for i in range(0, len(texts), g)):
        return [f"{i // g}:{t}" for i, t in enumerate(texts)]
    return texts


def rewards_by_group(keys: Sequence[Any], members: Sequence[Trajectory]) -> list[float]:
    """:func:`~aworld_gym.rollout.groups.training_rewards` of a batch that holds several groups, each member's taken
    within its own group (``keys[i]``: member ``i``'s group): a masked member gets the mean of its group's live
    members, never of the whole batch's."""
    by_key: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        by_key.setdefault(key, []).append(i)
    out = [0.0] * len(members)
    for idxs in by_key.values():
        for i, reward in zip(idxs, training_rewards([members[i] for i in idxs]), strict=True):
            out[i] = reward
    return out
