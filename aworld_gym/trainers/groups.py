"""GRPO groups of a TRL batch: which samples belong together (the groups themselves are collected, and their reward
hooks run, by :class:`~aworld_gym.rollout.groups.GroupCollector`, as for every other face)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aworld_gym.trainers.token_rollout import prompt_text


def group_keys(prompts: Sequence[Any], num_generations: int | None) -> list[str]:
    """The GRPO group of each prompt of a batch: TRL repeats each prompt ``num_generations`` times in a row, so
    consecutive blocks of identical prompts are groups (two groups of one prompt stay apart); otherwise, the text."""
    texts = [prompt_text(p) for p in prompts]
    g = int(num_generations or 0)
    if g > 1 and len(texts) % g == 0 and all(len(set(texts[i : i + g])) == 1 for i in range(0, len(texts), g)):
        return [f"{i // g}:{t}" for i, t in enumerate(texts)]
    return texts
