"""Jobs: which episodes a run makes (task, sample, seed, GRPO group), and the record of one that never ran."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aworld_gym.rollout.runner import EpisodeRecorder

SUCCESS = "answer"


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


def failed_record(
    env_id: str, job: Job, task_id: str | None, kind: str, exc: BaseException, policy: Any = None
) -> dict[str, Any]:
    """The record of an episode that never ran (its env could not be created, its actor died)."""
    rec = EpisodeRecorder(env_id, policy, job.seed, job.sample)
    rec.record["task_id"] = task_id
    rec.failed(kind, exc)
    return rec.finish()


def is_success(record: Mapping[str, Any]) -> bool:
    """An episode succeeded when its task score is 1 (all tests passed, the answer matched)."""
    score = record.get("score")
    return score is not None and float(score) >= 1.0 - 1e-9
