"""Scorers: ``(answer, task) -> score in [0, 1]``, pure functions with their own tests."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from aworld_gym.base.errors import ConfigError, TaskError
from aworld_gym.core.task import TaskSource

if TYPE_CHECKING:
    from aworld_gym.core.task import Task

Scorer = Callable[[str, "Task"], "float | bool"]


def normalize_answer(text: Any) -> str:
    """NFKC, case-folded, whitespace collapsed, surrounding quotes and a final period removed."""
    s = unicodedata.normalize("NFKC", str(text)).casefold().strip()
    s = re.sub(r"\s+", " ", s)
    s = s.strip("\"'`")
    return s[:-1].rstrip() if s.endswith(".") else s


def exact_match(answer: str, task: Task) -> float:
    """1.0 when the normalised answer equals the normalised reference (any of them, if a list)."""
    refs = task.answer if isinstance(task.answer, list | tuple) else [task.answer]
    got = normalize_answer(answer)
    return float(any(r is not None and normalize_answer(r) == got for r in refs))


def contains_match(answer: str, task: Task) -> float:
    """1.0 when the normalised reference occurs in the normalised answer."""
    refs = task.answer if isinstance(task.answer, list | tuple) else [task.answer]
    got = normalize_answer(answer)
    return float(any(r is not None and normalize_answer(r) in got for r in refs))


_SCORERS: dict[str, Scorer] = {"exact": exact_match, "contains": contains_match}


def register_scorer(name: str, scorer: Scorer) -> None:
    """Make ``scorer=name`` available."""
    _SCORERS[name] = scorer


def get_scorer(spec: str | Scorer | None) -> Scorer:
    """Resolve ``scorer=`` (a registered name or a callable ``(answer, task) -> float | bool``)."""
    if spec is None:
        return exact_match
    if isinstance(spec, str):
        try:
            return _SCORERS[spec]
        except KeyError:
            raise ConfigError(f"unknown scorer {spec!r}; known: {sorted(_SCORERS)} or pass a callable") from None
    if callable(spec):
        return spec
    raise ConfigError("scorer must be 'exact', 'contains', another registered name, or a callable")


def require_answers(tasks: Iterable[Task], scorer: Scorer | None, env_id: str | None = None) -> None:
    """Refuse, at load, a task without an ``answer`` when ``scorer`` compares the submitted answer with it.

    Only the answer scorers (``exact``, ``contains``) need one: a callable scorer reads what it needs (a task's
    metadata, say), and ``scorer=None`` means the env scores itself (it overrides ``score``: Code-v0 runs the task's
    tests, Browser-v0 reads the page's reward), so neither is checked. Without this check such a task would be
    accepted and every answer to it scored as if wrong.

    Raises:
        TaskError: naming the first task without an answer, the scorer, and what to do instead.
    """
    name = next((n for n, f in _SCORERS.items() if f is scorer and f in (exact_match, contains_match)), None)
    if name is None:
        return
    if isinstance(tasks, TaskSource):
        missing = tasks.first_without_answer
    else:
        missing = next((t for t in tasks if t.answer is None), None)
    if missing is not None:
        where = f"{env_id}: " if env_id else ""
        raise TaskError(
            f"{where}task {missing.id!r} has no 'answer' (nor 'final_answer' / 'ground_truth'), and the scorer "
            f"{name!r} compares the submitted answer with it: give the task an answer, or a scorer that needs none "
            "(scorer=<a callable (answer, task) -> float that reads what it needs>, or an env that overrides "
            "score(), as AWorld/Code-v0 does by running the task's tests)"
        )
