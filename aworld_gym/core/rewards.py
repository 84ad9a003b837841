"""Reward hooks and scorers.

A reward hook is ``hook(ctx: StepContext) -> float | dict[str, float]``. The env calls every hook after each
step, sums the components into the reward and reports each in ``info["reward_components"]``. Scores are
pure functions with their own tests.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aworld_gym.core.errors import ConfigError

if TYPE_CHECKING:
    from aworld_gym.core.actions import ParsedAction
    from aworld_gym.core.task import Task
    from aworld_gym.mcp.hub import ToolResult


@dataclass
class StepContext:
    """Everything a reward hook may look at for one step."""

    task: Task
    turn: int
    action: str
    parsed: ParsedAction
    results: list[ToolResult] = field(default_factory=list)
    answer: str | None = None
    score: float | None = None
    action_error: str | None = None
    terminated: bool = False
    truncated: bool = False
    truncation_reason: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


RewardHook = Callable[[StepContext], "float | Mapping[str, float]"]
Scorer = Callable[[str, "Task"], "float | bool"]


# ----- scorers: (answer, task) -> score in [0, 1] ------------------------------------------------------------
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


# ----- built-in hooks -------------------------------------------------------------------------------------
class TaskScore:
    """The terminal task score (the env's scorer applied to the submitted answer), times ``weight``."""

    name = "task"

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = weight

    def __call__(self, ctx: StepContext) -> dict[str, float]:
        if ctx.score is None:
            return {}
        return {self.name: self.weight * float(ctx.score)}


class FormatPenalty:
    """``penalty`` when the turn had a format error or neither a tool call nor an answer."""

    name = "format"

    def __init__(self, penalty: float = -0.1) -> None:
        self.penalty = penalty

    def __call__(self, ctx: StepContext) -> dict[str, float]:
        bad = bool(ctx.parsed.errors) or (not ctx.parsed.tool_calls and ctx.parsed.answer is None)
        return {self.name: self.penalty} if bad and ctx.truncation_reason != "env_crash" else {}


class ToolErrorPenalty:
    """``penalty`` per tool call that failed because of the model (unknown tool, bad arguments, tool error, refused)."""

    name = "tool_error"
    model_errors = frozenset({"unknown_tool", "bad_arguments", "too_large", "tool_error", "refused"})

    def __init__(self, penalty: float = -0.05) -> None:
        self.penalty = penalty

    def __call__(self, ctx: StepContext) -> dict[str, float]:
        n = sum(1 for r in ctx.results if r.error in self.model_errors)
        return {self.name: self.penalty * n} if n else {}


class CallCost:
    """A cost per tool call and per second of tool latency (both given as non-positive numbers)."""

    name = "call_cost"

    def __init__(self, per_call: float = -0.01, per_second: float = 0.0) -> None:
        self.per_call = per_call
        self.per_second = per_second

    def __call__(self, ctx: StepContext) -> dict[str, float]:
        if not ctx.results:
            return {}
        cost = self.per_call * len(ctx.results) + self.per_second * sum(r.latency_s for r in ctx.results)
        return {self.name: cost}


class AnswerLengthPenalty:
    """``per_char`` times the characters of the answer beyond ``free_chars``."""

    name = "answer_length"

    def __init__(self, free_chars: int = 200, per_char: float = -0.001) -> None:
        self.free_chars = free_chars
        self.per_char = per_char

    def __call__(self, ctx: StepContext) -> dict[str, float]:
        if ctx.answer is None or len(ctx.answer) <= self.free_chars:
            return {}
        return {self.name: self.per_char * (len(ctx.answer) - self.free_chars)}


def default_hooks() -> list[RewardHook]:
    """Task score, format penalty and tool-error penalty."""
    return [TaskScore(), FormatPenalty(), ToolErrorPenalty()]


def apply_hooks(hooks: list[RewardHook], ctx: StepContext) -> dict[str, float]:
    """Run every hook; a hook returning a bare float is reported under its name (or ``hook<i>``)."""
    components: dict[str, float] = {}
    for i, hook in enumerate(hooks):
        out = hook(ctx)
        if isinstance(out, Mapping):
            items = out.items()
        else:
            items = [(getattr(hook, "name", None) or getattr(hook, "__name__", None) or f"hook{i}", out)]
        for key, value in items:
            components[key] = components.get(key, 0.0) + float(value)
    return components
