"""Scorers: ``(answer, task) -> score in [0, 1]``, pure functions with their own tests."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aworld_gym.base.errors import ConfigError

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
