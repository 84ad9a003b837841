"""Group reward hooks on trajectory records: one complete GRPO group in, each episode's share out."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from aworld_gym.base.errors import ConfigError
from aworld_gym.core.rewards import Rubric, Scores
from aworld_gym.core.trajectory import sum_into


def group_scores(rubric: Rubric, records: Sequence[Mapping[str, Any]], results: Sequence[Any]) -> list[Scores]:
    """Turn each group hook's per-episode values (``results[k]``: hook ``k``'s list, or its exception) into Scores."""
    out = [Scores() for _ in records]
    for hook, values in zip(rubric.group, results, strict=True):
        if isinstance(values, Exception) or len(values) != len(records):
            exc = values if isinstance(values, Exception) else ValueError(
                f"returned {len(values)} values for a group of {len(records)}"
            )  # fmt: skip
            for s in out:
                rubric.record_failure(s, hook, exc)
            continue
        for s, value in zip(out, values, strict=True):
            try:
                s.add(hook, value)
            except Exception as exc:  # noqa: BLE001 - a failing reward hook is recorded, not raised
                rubric.record_failure(s, hook, exc)
    return out


def score_group(
    rubric: Rubric, records: Sequence[Mapping[str, Any]], run: Callable[[Awaitable[Any]], Any] | None = None
) -> list[Scores]:
    """Run the rubric's group hooks on one complete group of trajectory records (async hooks through ``run``)."""
    results: list[Any] = []
    for hook in rubric.group:
        try:
            values = hook.fn([dict(r) for r in records])
            if inspect.isawaitable(values):
                if run is None:
                    raise ConfigError(f"group hook {hook.name!r} is async: give a coroutine runner")
                values = run(values)
            results.append(list(values))
        except Exception as exc:
            if rubric.strict:
                raise
            results.append(exc)
    return group_scores(rubric, records, results)


def apply_group_hooks(
    rubric: Rubric | None, records: Sequence[dict[str, Any]], run: Callable[[Awaitable[Any]], Any] | None = None
) -> None:
    """Score one complete group and add each episode's group components to its record."""
    if rubric is not None and rubric.group and records:
        add_group_scores(records, score_group(rubric, records, run))


def add_group_scores(records: Sequence[dict[str, Any]], scores: Sequence[Scores]) -> None:
    """Add each episode's group components to its record (reward, reward_components, metrics, reward_errors)."""
    for rec, s in zip(records, scores, strict=True):
        comps = dict(rec.get("reward_components") or {})
        sum_into(comps, s.components)
        rec["reward_components"] = comps
        rec["reward"] = float(rec.get("reward") or 0.0) + s.total
        rec["group_reward_components"] = dict(s.components)
        if s.metrics:
            rec["metrics"] = {**(rec.get("metrics") or {}), **s.metrics}
        if s.errors:
            rec["reward_errors"] = {**(rec.get("reward_errors") or {}), **s.errors}
