"""GRPO groups inside trainers: the batch helpers of the TRL adapter, and the gate of a trainer that runs one sample
per coroutine (verl's agent loop).

A TRL batch is at hand whole: :func:`group_keys` finds its groups, :func:`run_group_hooks` scores them.

verl starts every sample of a worker's chunk as its own task on one event loop, all at once, and gives each the
group's ``uid``. A sample *enters* its group before its first await (so when any sample finishes, every member on
this worker has entered), and *leaves* with its record once its episode is over; the last to leave runs the group
reward hooks on the whole group, and every member gets its own share. A member that fails leaves without a record.
Members that verl placed on another worker (a group split by chunking) are not seen: the group is then the members
on this worker, recorded as ``group_size`` in each record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aworld_gym.core.rewards import Rubric, Scores, apply_group_hooks, score_group
from aworld_gym.trainers.token_rollout import prompt_text


@dataclass
class _Group:
    expected: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    scores: list[Scores] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)


class GroupGate:
    """The open groups of one event loop, keyed by ``uid``."""

    def __init__(self) -> None:
        self._groups: dict[str, _Group] = {}

    def enter(self, uid: str) -> None:
        self._groups.setdefault(uid, _Group()).expected += 1

    async def leave(self, uid: str, record: dict[str, Any] | None, rubric: Rubric | None) -> Scores | None:
        """Hand in this member's record (``None``: it failed); returns its group scores once the group is whole."""
        group = self._groups[uid]
        index = len(group.records) if record is not None else -1
        if record is not None:
            group.records.append(record)
        else:
            group.expected -= 1
        if len(group.records) >= group.expected and not group.done.is_set():
            self._groups.pop(uid, None)
            try:
                if rubric is not None and rubric.group and group.records:
                    from aworld_gym.rollout.envs import run_coroutine

                    group.scores = await asyncio.to_thread(score_group, rubric, group.records, run_coroutine)
            finally:
                group.done.set()  # the others never wait forever (a strict hook that raised: they get no scores)
        else:
            await group.done.wait()
        if index < 0 or not group.scores:
            return None
        return group.scores[index]

    def __len__(self) -> int:
        return len(self._groups)


_GATES: dict[Any, GroupGate] = {}


def gate() -> GroupGate:
    """The gate of the running event loop."""
    loop = asyncio.get_running_loop()
    if loop not in _GATES:
        for old in [k for k in _GATES if k.is_closed()]:
            del _GATES[old]
        _GATES[loop] = GroupGate()
    return _GATES[loop]


# ----- groups of a batch (TRL: the whole batch is at hand) ----------------------------------------------
def group_keys(prompts: Sequence[Any], num_generations: int | None) -> list[str]:
    """The GRPO group of each prompt of a batch: TRL repeats each prompt ``num_generations`` times in a row, so
    consecutive blocks of identical prompts are groups (two groups of one prompt stay apart); otherwise, the text."""
    texts = [prompt_text(p) for p in prompts]
    g = int(num_generations or 0)
    if g > 1 and len(texts) % g == 0 and all(len(set(texts[i : i + g])) == 1 for i in range(0, len(texts), g)):
        return [f"{i // g}:{t}" for i, t in enumerate(texts)]
    return texts


def run_group_hooks(rubric: Any, summaries: list[dict[str, Any]], keys: Sequence[str]) -> None:
    """Run group reward hooks on each GRPO group of a batch (the episodes with the same ``key``), and fold their
    components into ``env_reward`` / ``reward_components`` (the fields TRL's reward functions read)."""
    if rubric is None or not rubric.group:
        return
    by_key: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        by_key.setdefault(key, []).append(i)
    for idxs in by_key.values():
        records = [{**summaries[i], "reward": summaries[i]["env_reward"], "score": summaries[i]["task_score"]}
                   for i in idxs]  # fmt: skip
        from aworld_gym.rollout.envs import run_coroutine

        apply_group_hooks(rubric, records, run_coroutine)
        for i, rec in zip(idxs, records, strict=True):
            summaries[i]["env_reward"] = rec["reward"]
            summaries[i]["reward_components"] = rec["reward_components"]
            summaries[i]["group_reward_components"] = rec.get("group_reward_components", {})
