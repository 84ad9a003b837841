"""Re-scoring a saved run with another scorer (a fixed scorer, a judge) without running it again.

Each record of the run (JSONL or Parquet) is written to a new run with the new score beside the old ones:

- ``scores``: every scorer's score of this episode by name (the run's own under its ``scorer``, else
  ``"original"``), the new one added; ``scorer``: the name whose score ``score`` holds now;
- ``score``, the ``task`` reward component, ``reward`` and ``status`` follow the new score: the task component is
  the new score times the run's task weight (the old component over the old score; 1 where that cannot be told),
  the reward (and the reward of the turn that earned it) changes by as much as the component did, the status is
  read again from the ending; group hooks are not run again (``group_reward_components`` stay as they were);
- a void episode (its score never counted) and one that gave no answer keep their score, with ``None`` under the
  new name; everything else (turns, tokens, groups, timings) is copied as it was.

The reference answers come from the tasks (a task file, or the tasks of an env id), looked up by ``task_id``: runs
keep no answer key. ``aworld-gym report OLD NEW`` shows the two runs side by side.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aworld_gym.base.errors import ConfigError
from aworld_gym.core.scoring import get_scorer
from aworld_gym.core.task import TaskSource, load_tasks
from aworld_gym.core.trajectory import VOID, status_of

__all__ = ["RescoreSummary", "rescore", "resolve_scorer"]


@dataclass
class RescoreSummary:
    """What a re-scoring did: records read and written, re-scored, left as they were (void, no answer), whose task
    was not found, and how many changed status."""

    records: int = 0
    rescored: int = 0
    unscored: int = 0
    missing_task: list[str] = field(default_factory=list)
    changed: int = 0
    successes_before: int = 0
    successes_after: int = 0


def resolve_scorer(spec: str | Callable[..., Any]) -> tuple[str, Callable[..., Any]]:
    """``(name, scorer)`` of a registered name (``"exact"``, ``"contains"``...), ``"module:function"`` (a judge
    too: any ``(answer, task) -> float | bool | None``) or a callable."""
    if callable(spec):
        return getattr(spec, "__name__", "scorer"), spec
    if ":" in spec:
        module, _, attr = spec.partition(":")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"scorer {spec!r} cannot be loaded: {type(exc).__name__}: {exc}") from exc
        if not callable(fn):
            raise ConfigError(f"scorer {spec!r} is not a function (answer, task) -> score")
        return spec, fn
    return spec, get_scorer(spec)


def rescore(run: str | Path, out: str | Path, scorer: str | Callable[..., Any], tasks: Any) -> RescoreSummary:
    """Write ``run``'s records to ``out`` (``.jsonl`` or ``.parquet``) with ``scorer``'s scores (see the module).

    Args:
        run: the saved run.
        out: the new run (must not be ``run``).
        scorer: a registered name, ``"module:function"`` or a callable ``(answer, task) -> score``.
        tasks: the run's tasks: a :class:`TaskSource` or anything ``load_tasks`` reads.

    Raises:
        ConfigError: a scorer that cannot be loaded, ``out`` the same file as ``run``.
    """
    from aworld_gym.rollout.sinks import iter_records, open_sink

    if Path(out).resolve() == Path(run).resolve():
        raise ConfigError("rescore writes a new run: give --out another file than the run")
    name, fn = resolve_scorer(scorer)
    source: TaskSource = load_tasks(tasks)
    known = set(source.ids)
    summary = RescoreSummary()
    sink = open_sink(out)
    try:
        for record in iter_records(run):
            summary.records += 1
            summary.successes_before += record.get("status") == "ok"
            task_id = record.get("task_id")
            if task_id not in known:
                summary.missing_task.append(str(task_id))
                new_record = _beside(record, name, None)
            else:
                new_record = _rescored(record, name, fn, source.get(task_id), summary)
            summary.changed += new_record.get("status") != record.get("status")
            summary.successes_after += new_record.get("status") == "ok"
            sink.write(new_record)
    finally:
        sink.close()
    return summary


def _beside(record: dict[str, Any], name: str, score: float | None) -> dict[str, Any]:
    """``record`` with ``name``'s score beside the others, its own score left as it was."""
    old_name = record.get("scorer") or "original"
    scores = dict(record.get("scores") or {})
    scores.setdefault(old_name, record.get("score"))
    scores[name] = score
    return {**record, "scores": scores, "scorer": old_name}


def _rescored(record: dict[str, Any], name: str, fn: Callable[..., Any], task: Any, summary: RescoreSummary) -> dict:
    answer = record.get("answer")
    if record.get("status") == VOID or answer is None:
        summary.unscored += 1
        return _beside(record, name, None)
    value = fn(str(answer), task)
    new = None if value is None else float(value)
    if new is not None and not math.isfinite(new):
        raise ConfigError(f"scorer {name!r} gave {value!r} for task {task.id!r}: a score is a finite number")
    summary.rescored += 1
    out = _beside(record, name, new)
    old = record.get("score")
    components = dict(record.get("reward_components") or {})
    if "task" in components:
        weight = components["task"] / float(old) if old not in (None, 0) else 1.0
        new_component = weight * new if new is not None else 0.0
        delta = new_component - components["task"]
        out["reward"] = float(record.get("reward") or 0.0) + delta
        out["reward_components"] = {**components, "task": new_component}
        turns = [dict(t) for t in record.get("turns") or []]
        last = next((t for t in reversed(turns) if "task" in (t.get("reward_components") or {})), None)
        if last is not None:  # the turn that earned it: a trainer reading per-turn rewards sees the new one
            last["reward_components"] = {**last["reward_components"], "task": new_component}
            last["reward"] = float(last.get("reward") or 0.0) + delta
            out["turns"] = turns
    out["score"], out["scorer"] = new, name
    out["status"] = status_of(record.get("termination"), new, bool(record.get("terminated")))
    return out
