"""Jobs: which episodes a run makes (task, sample, seed, GRPO group), and what success means."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aworld_gym.core.trajectory import Termination

SUCCESS = Termination.ANSWER


@dataclass(frozen=True)
class Job:
    """One episode to run: which task, which sample of it, which seed, which GRPO group."""

    index: int
    task_index: int
    sample: int
    seed: int
    group: int = 0


def plan_jobs(n_tasks: int, episodes: int, group_size: int, seed: int, task_order: str) -> list[Job]:
    """Episode ``i`` belongs to group ``i // G``; groups take tasks in order (``cycle``) or drawn with ``seed``."""
    import numpy as np

    groups = math.ceil(episodes / group_size)
    if task_order == "cycle":
        order = [g % n_tasks for g in range(groups)]
    else:
        order = [int(x) for x in np.random.default_rng(seed).integers(n_tasks, size=groups)]
    seen: Counter[int] = Counter()
    jobs = []
    for i in range(episodes):
        g, k = divmod(i, group_size)
        task = order[g]
        if k == 0:
            seen[task] += 1
        jobs.append(Job(index=i, task_index=task, sample=(seen[task] - 1) * group_size + k, seed=seed + i, group=g))
    return jobs


def is_success(record: Mapping[str, Any]) -> bool:
    """An episode succeeded when its task score is 1 (all tests passed, the answer matched)."""
    score = record.get("score")
    return score is not None and float(score) >= 1.0 - 1e-9
